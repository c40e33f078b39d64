// Drives fmgate's POST /v1/embeddings with the official openai npm client,
// the way an existing app would: only baseURL and apiKey point at fmgate.
// Usage: node embeddings.cjs CASE MODEL INPUT_JSON; prints one JSON object
// describing what the app saw. CASE is "default" (no encoding_format: the
// SDK asks for base64 and decodes it itself), "base64" (asked for
// explicitly: the app decodes the little-endian float32 values) or
// "float". FMGATE_URL and FMGATE_KEY come from the environment; the SDK
// resolves through NODE_PATH.
const OpenAI = require('openai');

const [, , kase, model, inputJSON] = process.argv;
const client = new OpenAI({
  baseURL: process.env.FMGATE_URL + '/v1',
  apiKey: process.env.FMGATE_KEY,
  maxRetries: 0,
});

function fromBase64(s) {
  const b = Buffer.from(s, 'base64');
  const out = [];
  for (let i = 0; i < b.length; i += 4) out.push(b.readFloatLE(i));
  return out;
}

async function main() {
  const body = { model, input: JSON.parse(inputJSON) };
  if (kase !== 'default') body.encoding_format = kase;
  try {
    const { data, response } = await client.embeddings.create(body).withResponse();
    return {
      model: data.model,
      usage: data.usage,
      tier: response.headers.get('x-fmgate-tier'),
      degraded: response.headers.get('x-fmgate-degraded'),
      kinds: data.data.map((d) => (typeof d.embedding === 'string' ? 'string' : d.embedding.constructor.name)),
      indexes: data.data.map((d) => d.index),
      vectors: data.data.map((d) => (typeof d.embedding === 'string' ? fromBase64(d.embedding) : Array.from(d.embedding))),
    };
  } catch (e) {
    return { failed: true, class: e.constructor.name, status: e.status ?? null, code: e.code ?? null, param: e.param ?? null, message: e.message };
  }
}

main().then(
  (r) => process.stdout.write(JSON.stringify(r)),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
