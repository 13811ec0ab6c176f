// A host composes its system prompt through the daemon (docs/typescript-client.md, "Quickstart"):
// the daemon inserts the user's memory block before the active skill and returns the prompt
// to send to the model.
//
//   creative-memory serve &                           # the daemon, on 127.0.0.1:7744
//   export CREATIVE_MEMORY_TOKEN="$(creative-memory token)"
//   npm run example                                   # or: node dist/examples/compose-prompt.js
//
// Environment: CREATIVE_MEMORY_URL (default http://127.0.0.1:7744), CREATIVE_MEMORY_TOKEN
// (required), CREATIVE_MEMORY_PROJECT (optional project id). A file argument replaces the
// sample host prompt.
import { readFileSync } from "node:fs";
import { CreativeMemoryClient, DEFAULT_BASE_URL, ProblemError, TransportError } from "../src/index.js";

const SAMPLE_HOST_PROMPT = `You are Open Design's generation agent.

## Design system
Use the brand tokens; never invent colours outside the palette.

## Active skill
Landing pages: hero, three feature cards, a call to action.
`;

async function main(): Promise<number> {
  const token = process.env.CREATIVE_MEMORY_TOKEN;
  if (!token) {
    console.error("set CREATIVE_MEMORY_TOKEN (the output of `creative-memory token`)");
    return 2;
  }
  const client = new CreativeMemoryClient({
    baseUrl: process.env.CREATIVE_MEMORY_URL ?? DEFAULT_BASE_URL,
    token,
  });
  const file = process.argv[2];
  const hostPrompt = file ? readFileSync(file, "utf8") : SAMPLE_HOST_PROMPT;
  try {
    const composed = await client.composePrompt({
      host_prompt: hostPrompt,
      project_id: process.env.CREATIVE_MEMORY_PROJECT ?? null,
    });
    process.stdout.write(composed.prompt ?? hostPrompt);
    const lines = composed.block ? composed.block.trim().split("\n").length : 0;
    console.error(`memory block: ${lines} lines (${composed.variant}, project ${composed.project_id ?? "none"})`);
    return 0;
  } catch (err) {
    if (err instanceof ProblemError) {
      // status, the offending field and the daemon's explanation, in one line
      console.error(`daemon answered ${err.status}${err.field ? ` (${err.field})` : ""}: ${err.detail}`);
      return 1;
    }
    if (err instanceof TransportError) {
      console.error(`${err.message}; is \`creative-memory serve\` running?`);
      return 1;
    }
    throw err;
  }
}

process.exitCode = await main();
