// An app on the official openai npm client's Responses API, pointed at
// fmgate: it offers a function tool, runs the call the model makes and
// sends the result back with previous_response_id, first with
// client.responses.create, then with client.responses.stream (whose
// events it records, the call's argument deltas among them); then it continues a response that does not exist.
// Usage: node openai_responses.cjs; FMGATE_URL, FMGATE_KEY from the
// environment. Prints one JSON object of what the app saw.
'use strict';
const OpenAI = require('openai');

const client = new OpenAI({ baseURL: process.env.FMGATE_URL + '/v1', apiKey: process.env.FMGATE_KEY, maxRetries: 0 });
const tools = [{
  type: 'function',
  name: 'get_weather',
  description: 'The weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
}];
const question = 'What is the weather in 東京 today?';
const result = '晴れ、最高気温18度';

function callOf(response) {
  const call = response.output.find((o) => o.type === 'function_call');
  if (!call) throw new Error('no function_call in ' + JSON.stringify(response.output));
  return call;
}

function seen(first, call, second) {
  return {
    call: { name: call.name, args: JSON.parse(call.arguments), call_id: call.call_id },
    firstId: first.id, previous: second.previous_response_id, text: second.output_text, status: second.status,
  };
}

async function create() {
  const first = await client.responses.create({ model: 'sonnet', input: question, tools });
  const call = callOf(first);
  const second = await client.responses.create({
    model: 'sonnet', tools, previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: result }],
  });
  return seen(first, call, second);
}

async function stream() {
  const f = client.responses.stream({ model: 'sonnet', input: question, tools });
  const callEvents = [];
  let argDeltas = '';
  f.on('event', (e) => callEvents.push(e.type));
  f.on('response.function_call_arguments.delta', (e) => { argDeltas += e.delta; });
  const first = await f.finalResponse();
  const call = callOf(first);
  const events = [];
  let deltas = '';
  const s = client.responses.stream({
    model: 'sonnet', tools, previous_response_id: first.id,
    input: [{ type: 'function_call_output', call_id: call.call_id, output: result }],
  });
  s.on('event', (e) => events.push(e.type));
  s.on('response.output_text.delta', (e) => { deltas += e.delta; });
  const second = await s.finalResponse();
  return { ...seen(first, call, second), events, deltas, callEvents, argDeltas, callArgs: call.arguments };
}

async function missing() {
  try {
    await client.responses.create({ model: 'sonnet', input: 'hi', previous_response_id: 'resp_000000000000000000000000' });
    return { status: 0 };
  } catch (e) {
    if (!(e instanceof OpenAI.NotFoundError)) throw e;
    return { status: e.status, code: e.code };
  }
}

(async () => {
  const out = { create: await create(), stream: await stream(), missing: await missing() };
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { process.stderr.write(String(e && e.stack || e)); process.exit(1); });
