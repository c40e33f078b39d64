// An agent app on the official openai npm client, pointed at fmgate: the
// SDK's own tool runner (chat.completions.runTools) offers two tools, runs
// each call the model makes, sends the results back and returns the final
// answer; JSON, then streamed. A JSON-schema answer is parsed by the SDK's
// own parse helper. Usage: node openai_agent.cjs; FMGATE_URL, FMGATE_KEY
// from the environment. Prints one JSON object of what the app saw.
'use strict';
const OpenAI = require('openai');

const client = new OpenAI({ baseURL: process.env.FMGATE_URL + '/v1', apiKey: process.env.FMGATE_KEY, maxRetries: 0 });
const calls = [];
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      parse: JSON.parse,
      function: (args) => { calls.push({ name: 'get_weather', args }); return '晴れ、最高気温18度'; },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      description: 'The local time',
      parameters: { type: 'object', properties: { zone: { type: 'string', enum: ['Asia/Tokyo', 'UTC'] } }, required: ['zone'] },
      parse: JSON.parse,
      function: (args) => { calls.push({ name: 'get_time', args }); return '14:05'; },
    },
  },
];

async function loop(stream) {
  calls.length = 0;
  const runner = client.chat.completions.runTools({
    model: 'sonnet',
    stream,
    messages: [{ role: 'user', content: 'What is the weather and the local time in 東京?' }],
    tools,
  });
  const text = await runner.finalContent();
  return { text, calls: calls.slice(), messages: (await runner.allChatCompletions()).length };
}

async function schema() {
  const completion = await client.chat.completions.parse({
    model: 'sonnet',
    messages: [{ role: 'user', content: 'Give me one manga to start with.' }],
    response_format: {
      type: 'json_schema',
      json_schema: {
        name: 'manga', strict: true,
        schema: { type: 'object', properties: { title: { type: 'string' }, volumes: { type: 'integer', minimum: 1 } }, required: ['title', 'volumes'], additionalProperties: false },
      },
    },
  });
  return completion.choices[0].message.parsed;
}

(async () => {
  const out = { json: await loop(false), stream: await loop(true), parsed: await schema() };
  process.stdout.write(JSON.stringify(out));
})().catch((e) => { process.stderr.write(String(e && e.stack || e)); process.exit(1); });
