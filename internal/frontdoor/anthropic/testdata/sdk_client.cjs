// Drives fmgate's Anthropic front door with the official @anthropic-ai/sdk
// client, as an unmodified app would after changing its base URL and key.
// Environment: BASE_URL (a gateway), LIMITED_URL (one whose chat route allows
// a single turn), DEGRADED_URL (one whose sonnet is down), KEY (a valid key).
// Prints one JSON object with what each case observed; the Go test asserts.
'use strict';
const Anthropic = require('@anthropic-ai/sdk');

const { BASE_URL, LIMITED_URL, DEGRADED_URL, KEY } = process.env;
const ask = (text, model = 'sonnet') => ({
  model,
  max_tokens: 256,
  system: 'Answer briefly.',
  messages: [{ role: 'user', content: text }],
});

async function json(client, text, model) {
  const { data, response } = await client.messages.create(ask(text, model)).withResponse();
  return {
    text: data.content.map((b) => b.text).join(''),
    model: data.model,
    stopReason: data.stop_reason,
    usage: data.usage,
    tier: response.headers.get('x-fmgate-tier'),
    degraded: response.headers.get('x-fmgate-degraded'),
    traceId: response.headers.get('x-fmgate-trace-id'),
  };
}

async function streamed(client, text) {
  const stream = client.messages.stream(ask(text));
  let deltas = '';
  stream.on('text', (t) => { deltas += t; });
  const { response } = await stream.withResponse();
  const final = await stream.finalMessage();
  return {
    text: final.content.map((b) => b.text).join(''),
    deltas,
    model: final.model,
    stopReason: final.stop_reason,
    usage: final.usage,
    tier: response.headers.get('x-fmgate-tier'),
    degraded: response.headers.get('x-fmgate-degraded'),
    traceId: response.headers.get('x-fmgate-trace-id'),
  };
}

async function failure(fn) {
  try {
    await fn();
    return { error: null };
  } catch (e) {
    const classes = ['RateLimitError', 'AuthenticationError', 'BadRequestError', 'NotFoundError', 'APIError'];
    return {
      error: classes.find((c) => e instanceof Anthropic[c]) || e.constructor.name,
      status: e.status,
      type: e.error && e.error.error && e.error.error.type,
      retryAfter: e.headers && e.headers.get('retry-after'),
      message: String(e.message),
    };
  }
}

async function main() {
  const byKey = new Anthropic({ baseURL: BASE_URL, apiKey: KEY });
  const byToken = new Anthropic({ baseURL: BASE_URL, authToken: KEY });
  const out = {};
  out.jsonEN = await json(byKey, 'Can you recommend a fantasy manga?');
  out.jsonJA = await json(byToken, 'おすすめのファンタジー漫画を教えてください');
  out.streamEN = await streamed(byKey, 'When does the next volume of One Piece come out?');
  out.streamJA = await streamed(byToken, 'ワンピースの最新巻はいつ発売ですか？');

  out.wrongKey = await failure(() => new Anthropic({ baseURL: BASE_URL, apiKey: 'sk-wrong', maxRetries: 0 }).messages.create(ask('hi')));
  out.wrongToken = await failure(() => new Anthropic({ baseURL: BASE_URL, authToken: 'sk-wrong', maxRetries: 0 }).messages.create(ask('hi')));
  out.unsupported = await failure(() => byKey.messages.create({ ...ask('hi'), thinking: { type: 'adaptive' } }));
  out.claudeID = await json(byKey, 'Can you recommend a fantasy manga?', 'claude-3-5-sonnet-latest');
  const counted = await byKey.messages.countTokens({ model: 'claude-3-5-sonnet-latest', messages: [{ role: 'user', content: 'おすすめのファンタジー漫画を教えてください' }] });
  out.countTokens = counted.input_tokens;
  const models = await byKey.models.list();
  out.models = models.data.map((m) => m.id);
  out.unknownModel = await json(byKey, 'Can you recommend a fantasy manga?', 'claude-nowhere');

  const limited = new Anthropic({ baseURL: LIMITED_URL, apiKey: KEY, maxRetries: 0 });
  out.firstLimited = await json(limited, 'Recommend a manga');
  out.rateLimited = await failure(() => limited.messages.create(ask('Recommend another manga')));
  out.rateLimitedStream = await failure(async () => {
    const s = limited.messages.stream(ask('And another'));
    await s.finalMessage();
  });

  const degraded = new Anthropic({ baseURL: DEGRADED_URL, apiKey: KEY });
  out.degradedJSON = await json(degraded, 'Recommend a manga about cooking');
  out.degradedStream = await streamed(degraded, '料理の漫画をおすすめしてください');

  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e));
  process.exit(1);
});
