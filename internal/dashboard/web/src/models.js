// The configured models from the versions ledger (GET /admin/versions), so
// that figures keyed by model name ("sonnet") and by provider model id
// ("anthropic.claude-…") can be joined, and the primary model is known;
// and the embedding tiers, listed apart.

import { get } from "./api.js";

let pending = null;

/** Resolves to {primary, names, embeddings, nameOf(key), idOf(name)}; never rejects (unknown keys map to themselves). */
export function models() {
  if (!pending) {
    pending = get("/admin/versions").then(
      (v) => catalog(v?.models || [], v?.embeddings || []),
      (e) => {
        pending = null; // try again next time
        return { ...catalog([]), error: e };
      },
    );
  }
  return pending;
}

function catalog(list, embeddings = []) {
  const byKey = new Map();
  for (const m of list) {
    byKey.set(m.name, m.name);
    if (m.modelId) byKey.set(m.modelId, m.name);
  }
  return {
    primary: list[0]?.name || "",
    names: list.map((m) => m.name),
    embeddings: embeddings.map((m) => m.name),
    nameOf: (key) => byKey.get(key) || key,
    idOf: (name) => list.find((m) => m.name === name)?.modelId || "",
  };
}
