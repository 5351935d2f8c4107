//! `metapu console` through the real broker, a running daemon and a real browser.

mod api_fuzz;
mod browser;
