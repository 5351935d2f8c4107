// metapu console: the verdict buttons. The page is the server's; this only posts a
// verdict (JSON, which no other site's form can send, with the analyst's sign-in cookie,
// which no other site's request carries) and waits for the daemon's answer on the
// incident before showing the page again. Each verdict has an id made here, so a retry
// of the same click is the same verdict, and the daemon takes it once.
"use strict";

function field(id) {
  return document.getElementById(id);
}

// An id for each verdict button, made once per page: 16 random bytes as hex
// (getRandomValues works on plain http too, where randomUUID does not).
const verdictIds = {};
function verdictId(verdict) {
  if (!verdictIds[verdict]) {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    verdictIds[verdict] = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }
  return verdictIds[verdict];
}

async function waitForAnswer(incident, out) {
  for (let i = 0; i < 120; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    const res = await fetch("/api/incidents/" + encodeURIComponent(incident));
    if (!res.ok) continue;
    const row = await res.json();
    if (row.pending.length === 0) {
      out.textContent = row.verdict || "answered";
      location.reload();
      return;
    }
  }
  out.textContent = "sent; the daemon has not answered yet";
}

async function give(form, verdict) {
  const out = field("verdict-result");
  const body = {
    incident_id: form.dataset.incident,
    device: form.dataset.device,
    verdict: verdict,
    note: field("note").value,
    id: verdictId(verdict),
  };
  out.textContent = "sending…";
  const res = await fetch("/api/verdicts", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    credentials: "same-origin",
    body: JSON.stringify(body),
  });
  const answer = await res.json().catch(() => ({ error: res.statusText }));
  if (!res.ok) {
    out.textContent = "refused: " + (answer.error || res.status);
    return;
  }
  out.textContent = verdict + " sent by " + answer.by + "; waiting for the daemon…";
  await waitForAnswer(body.incident_id, out);
}

document.addEventListener("DOMContentLoaded", () => {
  const form = field("verdict");
  if (!form) return;
  for (const button of form.querySelectorAll("button[data-verdict]")) {
    button.addEventListener("click", () => give(form, button.dataset.verdict));
  }
});
