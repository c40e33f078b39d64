// Drives fmgate's OpenAI-compatible front door with the official openai
// npm client, the way an existing app would: only baseURL and apiKey point
// at fmgate. Usage: node client.cjs CASE MODEL QUESTION; prints one JSON
// object describing what the app saw. FMGATE_URL and FMGATE_KEY come from
// the environment; the SDK resolves through NODE_PATH.
const OpenAI = require('openai');

const [, , kase, model, question] = process.argv;
const client = new OpenAI({
  baseURL: process.env.FMGATE_URL + '/v1',
  apiKey: process.env.FMGATE_KEY,
  maxRetries: 0,
});

const body = {
  model,
  messages: [
    { role: 'system', content: 'Answer briefly.' },
    { role: 'user', content: [{ type: 'text', text: 'hello' }] },
    { role: 'assistant', content: 'Hello! How can I help?' },
    { role: 'user', content: question },
  ],
  max_tokens: 300,
};

function served(response) {
  return {
    tier: response.headers.get('x-fmgate-tier'),
    degraded: response.headers.get('x-fmgate-degraded'),
    traceId: response.headers.get('x-fmgate-trace-id'),
  };
}

function failure(e) {
  return {
    failed: true,
    class: e.constructor.name,
    status: e.status ?? null,
    code: e.code ?? null,
    message: e.message,
    rateLimit: e instanceof OpenAI.RateLimitError,
    authentication: e instanceof OpenAI.AuthenticationError,
    apiError: e instanceof OpenAI.APIError,
    retryAfter: e.headers?.get?.('retry-after') ?? null,
  };
}

async function json() {
  const { data, response } = await client.chat.completions.create(body).withResponse();
  return {
    text: data.choices[0].message.content,
    model: data.model,
    finish: data.choices[0].finish_reason,
    usage: data.usage,
    ...served(response),
  };
}

async function stream() {
  const out = { text: '', chunks: 0, usage: null, finish: null, model: null };
  try {
    const { data, response } = await client.chat.completions
      .create({ ...body, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    Object.assign(out, served(response));
    for await (const chunk of data) {
      out.chunks++;
      out.model = chunk.model;
      if (chunk.usage) out.usage = chunk.usage;
      for (const c of chunk.choices) {
        out.text += c.delta.content ?? '';
        if (c.finish_reason) out.finish = c.finish_reason;
      }
    }
  } catch (e) {
    return { ...out, ...failure(e) };
  }
  return out;
}

async function main() {
  switch (kase) {
    case 'json':
      try {
        return await json();
      } catch (e) {
        return failure(e);
      }
    case 'stream':
      return stream();
  }
  throw new Error(`unknown case ${kase}`);
}

main().then(
  (r) => process.stdout.write(JSON.stringify(r)),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
