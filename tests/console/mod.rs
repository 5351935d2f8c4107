//! `metapu console` through the real broker, a running daemon and a real browser.

mod browser;
