// metapu console: the verdict buttons. The page is the server's; this only posts a
// verdict (JSON with the bearer token, which no other site's form can send) and waits
// for the daemon's answer on the incident before showing the page again.
"use strict";

function field(id) {
  return document.getElementById(id);
}

function remember(id, store) {
  const input = field(id);
  if (!input) return;
  input.value = store.getItem("metapu." + id) || input.value;
  input.addEventListener("change", () => store.setItem("metapu." + id, input.value));
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
    by: field("by").value,
    note: field("note").value,
  };
  out.textContent = "sending…";
  const res = await fetch("/api/verdicts", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer " + field("token").value },
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
  remember("by", window.localStorage);
  remember("token", window.sessionStorage);
  const form = field("verdict");
  if (!form) return;
  for (const button of form.querySelectorAll("button[data-verdict]")) {
    button.addEventListener("click", () => give(form, button.dataset.verdict));
  }
});
