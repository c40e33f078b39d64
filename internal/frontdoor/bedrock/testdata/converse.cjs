// Drives fmgate's Bedrock Runtime front door with the official JavaScript
// client (@aws-sdk/client-bedrock-runtime: its default HTTP/2 handler, real
// SigV4 signing). Run by door_sdkjs_test.go with NODE_PATH pointing at
// internal/frontdoor/testdata/sdk/node_modules:
//
//   FMGATE_URL=http://127.0.0.1:PORT FMGATE_KEY_ID=… FMGATE_SECRET=… node converse.cjs SCENARIO
//
// It prints one JSON object describing what the client saw.
'use strict';
const {
  BedrockRuntimeClient, ConverseCommand, ConverseStreamCommand,
  InvokeModelCommand, InvokeModelWithResponseStreamCommand, CountTokensCommand,
  ThrottlingException, BedrockRuntimeServiceException,
} = require('@aws-sdk/client-bedrock-runtime');

const url = process.env.FMGATE_URL;
const model = process.env.FMGATE_MODEL || 'anthropic.claude-3-5-sonnet-20240620-v1:0';

function client(secret) {
  const c = new BedrockRuntimeClient({
    region: 'us-east-1',
    endpoint: url,
    credentials: { accessKeyId: process.env.FMGATE_KEY_ID, secretAccessKey: secret || process.env.FMGATE_SECRET },
    maxAttempts: 1,
  });
  // Keep the last response's headers: x-fmgate-* say how it was served.
  c.headers = {};
  c.middlewareStack.add((next) => async (args) => {
    const out = await next(args);
    c.headers = out.response.headers;
    return out;
  }, { step: 'deserialize', name: 'fmgateHeaders' });
  c.protocol = c.config.requestHandler && c.config.requestHandler.constructor.name;
  return c;
}

function served(c) {
  return { tier: c.headers['x-fmgate-tier'], degraded: c.headers['x-fmgate-degraded'], traceId: c.headers['x-fmgate-trace-id'] };
}

const messages = (text) => [{ role: 'user', content: [{ text }] }];
const questions = { ja: 'おすすめの漫画を教えて', en: 'Recommend a fantasy manga series' };

async function converse(c, text) {
  const out = await c.send(new ConverseCommand({
    modelId: model, messages: messages(text),
    system: [{ text: 'Answer briefly.' }],
    inferenceConfig: { maxTokens: 400, temperature: 0.3 },
  }));
  return { text: out.output.message.content.map((b) => b.text).join(''), stopReason: out.stopReason, usage: out.usage, ...served(c) };
}

async function converseStream(c, text) {
  const out = await c.send(new ConverseStreamCommand({ modelId: model, messages: messages(text) }));
  const r = { text: '', deltas: 0, events: [], ...served(c) };
  for await (const ev of out.stream) {
    const kind = Object.keys(ev)[0];
    if (kind === 'contentBlockDelta') {
      r.text += ev.contentBlockDelta.delta.text;
      r.deltas++;
      if (r.events[r.events.length - 1] !== kind) r.events.push(kind);
      continue;
    }
    r.events.push(kind);
    if (kind === 'messageStop') r.stopReason = ev.messageStop.stopReason;
    if (kind === 'metadata') r.usage = ev.metadata.usage;
  }
  return r;
}

const weatherTools = {
  tools: [
    { toolSpec: { name: 'get_weather', description: 'The weather in a city.', inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } } },
    { toolSpec: { name: 'get_time', description: 'The local time in a city.', inputSchema: { json: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } } },
  ],
  toolChoice: { auto: {} },
};

// streamTools streams an answer with tools offered: its text, its tool
// calls (inputs joined from their fragments and parsed), its events.
async function streamTools(c, msgs) {
  const out = await c.send(new ConverseStreamCommand({ modelId: model, messages: msgs, toolConfig: weatherTools }));
  const r = { text: '', calls: [], fragments: [], events: [] };
  const byIndex = {};
  for await (const ev of out.stream) {
    const kind = Object.keys(ev)[0];
    const v = ev[kind];
    if (kind === 'contentBlockStart' && v.start.toolUse) {
      byIndex[v.contentBlockIndex] = { toolUseId: v.start.toolUse.toolUseId, name: v.start.toolUse.name, input: '' };
      r.calls.push(byIndex[v.contentBlockIndex]);
    } else if (kind === 'contentBlockDelta' && v.delta.toolUse) {
      byIndex[v.contentBlockIndex].input += v.delta.toolUse.input;
      r.fragments.push(v.delta.toolUse.input);
      if (r.events[r.events.length - 1] === kind) continue;
    } else if (kind === 'contentBlockDelta') {
      r.text += v.delta.text;
      if (r.events[r.events.length - 1] === kind) continue;
    } else if (kind === 'messageStop') {
      r.stopReason = v.stopReason;
    }
    r.events.push(kind);
  }
  for (const call of r.calls) call.input = JSON.parse(call.input);
  return r;
}

function describe(e) {
  return {
    name: e.name,
    status: e.$metadata && e.$metadata.httpStatusCode,
    throttlingClass: e instanceof ThrottlingException,
    serviceException: e instanceof BedrockRuntimeServiceException,
    message: e.message,
  };
}

const scenarios = {
  async converse() {
    const c = client();
    return { handler: c.protocol, ja: await converse(c, questions.ja), en: await converse(c, questions.en) };
  },
  async stream() {
    const c = client();
    return { ja: await converseStream(c, questions.ja), en: await converseStream(c, questions.en) };
  },
  async tools() {
    const c = client();
    const msgs = messages('大阪の weather と time を教えてください');
    const first = await streamTools(c, msgs);
    msgs.push({ role: 'assistant', content: first.calls.map((call) => ({ toolUse: call })) });
    msgs.push({
      role: 'user',
      content: first.calls.map((call) => ({ toolResult: { toolUseId: call.toolUseId, content: [{ json: { answer: call.name + ' ok' } }] } })),
    });
    return { first, second: await streamTools(c, msgs) };
  },
  // A JSON-schema answer (outputConfig.textFormat), JSON and streamed.
  async json() {
    const c = client();
    const schema = { type: 'object', properties: { title: { type: 'string' }, volumes: { type: 'integer' } }, required: ['title', 'volumes'], additionalProperties: false };
    const input = {
      modelId: model,
      messages: messages('Give me one manga to start with, as JSON.'),
      outputConfig: { textFormat: { type: 'json_schema', structure: { jsonSchema: { name: 'manga', schema: JSON.stringify(schema) } } } },
    };
    const whole = await c.send(new ConverseCommand(input));
    const out = await c.send(new ConverseStreamCommand(input));
    let streamed = '';
    for await (const ev of out.stream) {
      if (ev.contentBlockDelta && ev.contentBlockDelta.delta.text) streamed += ev.contentBlockDelta.delta.text;
    }
    return {
      converse: JSON.parse(whole.output.message.content.map((b) => b.text || '').join('')),
      stopReason: whole.stopReason,
      stream: JSON.parse(streamed),
    };
  },
  async throttled() {
    const c = client();
    await converse(c, questions.en); // the one call the limit allows
    try {
      await converse(c, questions.en);
      return { error: null };
    } catch (e) {
      return { error: describe(e), retryAfter: e.$response && e.$response.headers && e.$response.headers['retry-after'] };
    }
  },
  async wrongSecret() {
    try {
      await converse(client('not-the-secret'), questions.en);
      return { error: null };
    } catch (e) {
      return { error: describe(e) };
    }
  },
  // InvokeModel with Anthropic's Messages body, its stream's chunk bytes
  // decoded as Anthropic's events, and CountTokens, as Bedrock apps (and
  // the seeds' own code) call them.
  async invoke() {
    const c = client();
    const body = JSON.stringify({
      anthropic_version: 'bedrock-2023-05-31', max_tokens: 300,
      messages: [{ role: 'user', content: questions.ja }],
    });
    const out = await c.send(new InvokeModelCommand({ modelId: model, contentType: 'application/json', accept: 'application/json', body }));
    const msg = JSON.parse(new TextDecoder().decode(out.body));
    const st = await c.send(new InvokeModelWithResponseStreamCommand({ modelId: model, contentType: 'application/json', body }));
    const events = [];
    let text = '';
    let metrics = null;
    for await (const ev of st.body) {
      if (!ev.chunk) continue;
      const e = JSON.parse(new TextDecoder().decode(ev.chunk.bytes));
      events.push(e.type);
      if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
      if (e['amazon-bedrock-invocationMetrics']) metrics = e['amazon-bedrock-invocationMetrics'];
    }
    const count = await c.send(new CountTokensCommand({ modelId: model, input: { invokeModel: { body: new TextEncoder().encode(body) } } }));
    return {
      invoke: { type: msg.type, text: msg.content[0].text, stopReason: msg.stop_reason, input: msg.usage.input_tokens, output: msg.usage.output_tokens },
      stream: { events, text, metrics },
      count: count.inputTokens,
    };
  },
  async degraded() {
    const c = client();
    return { converse: await converse(c, questions.en), stream: await converseStream(c, questions.ja) };
  },
};

const run = scenarios[process.argv[2]];
if (!run) {
  console.error('unknown scenario ' + process.argv[2]);
  process.exit(2);
}
run().then(
  (r) => { process.stdout.write(JSON.stringify(r)); process.exit(0); },
  (e) => { console.error(e); process.exit(1); },
);
