#!/usr/bin/env node
// `hub`: one command whose roles run together (start) or apart. See `hub --help`.
import { ConfigError, loadConfig } from '../infra/config.ts';
import { startNode } from '../infra/node.ts';

const HELP = `Device Hub

Usage: hub <command>

Commands:
  start     Run every role in one process (the embedded profile's default).
  api       Run only the HTTP API role.
  help      Show this text.

Configuration comes from HUB_* environment variables (README.md lists them all).`;

async function main(argv: string[]): Promise<number> {
  const command = argv[0] ?? 'help';
  if (command === 'help' || command === '--help' || command === '-h') {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  if (command !== 'start' && command !== 'api') {
    process.stderr.write(`hub: unknown command '${command}' (see hub --help)\n`);
    return 2;
  }
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`hub: invalid configuration: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const node = await startNode(config, command === 'start' ? ['api', 'all'] : ['api']);
  const stop = async (signal: string) => {
    node.logger.info({ signal }, 'shutting down');
    await node.stop();
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
  return -1; // keep running
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err) => {
    process.stderr.write(`hub: ${(err as Error).stack ?? err}\n`);
    process.exit(1);
  },
);
