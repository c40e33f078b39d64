// Labels of a breakdown row whose key is empty: the spans or turns that
// carry no value for the attribute, said in words rather than as a blank or
// a "(none)" that reads like a value.

/** The label of a row without a key, for a breakdown by `by`. */
export function noKey(by) {
  switch (by) {
    case "model":
    case "prompt":
      return "non-model work";
    case "locale":
      return "unknown (refused before detection)";
    default:
      return `unknown (no ${by} recorded)`;
  }
}

/** The hover text of a row: its full key, or what a row without one holds. */
export function keyTitle(by, key) {
  if (key) return key;
  switch (by) {
    case "model":
      return "spans without a model: compute time, session and cache writes, cache and FAQ lookups";
    case "prompt":
      return "spans without a prompt version: compute time, session and cache writes, cache and FAQ lookups";
    case "locale":
      return "without a locale: turns refused before their language was known (a request with neither a message nor a locale, a malformed frame) and work outside any turn, such as canary changes";
    default:
      return `without a ${by}: work outside any turn, or turns stored before the ${by} was recorded`;
  }
}
