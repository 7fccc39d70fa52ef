// Drives a served Host through the real AG-UI client (@ag-ui/client's HttpAgent): one
// run that sends a message and stops at an approval, then one that approves it. Prints
// {"runs": [[events...], [events...]], "messages": [...]} as JSON on stdout.
//
// usage: node agui_client.cjs MODULES URL TOKEN THREAD
const { createRequire } = require("node:module");
const [modules, url, token, threadId] = process.argv.slice(2);
const { HttpAgent } = createRequire(modules + "/")("@ag-ui/client");

async function run(agent, runId) {
  const events = [];
  const result = await agent.runAgent(
    { runId },
    { onEvent: ({ event }) => void events.push(event) },
  );
  return { events, result };
}

async function main() {
  const agent = new HttpAgent({
    url: `${url}/ag-ui/run`,
    headers: { Authorization: `Bearer ${token}` },
    threadId,
    initialMessages: [{ id: "user-1", role: "user", content: "Note milk." }],
  });
  const first = await run(agent, "run-1");
  // The human-in-the-loop step: the run ended on a call of the frontend tool
  // emelex_approval; the user's answer is that call's tool message.
  const asked = agent.messages
    .flatMap((message) => message.toolCalls ?? [])
    .filter((call) => call.function.name === "emelex_approval");
  if (asked.length !== 1) throw new Error(`expected one approval, got ${asked.length}`);
  agent.addMessage({
    id: "answer-1",
    role: "tool",
    toolCallId: asked[0].id,
    content: JSON.stringify({ approved: true }),
  });
  const second = await run(agent, "run-2");
  process.stdout.write(
    JSON.stringify({ runs: [first.events, second.events], messages: agent.messages }),
  );
}

main().catch((error) => {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
});
