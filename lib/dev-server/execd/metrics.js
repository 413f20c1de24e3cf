// execd route module: GET /metrics (CPU sampled over 1 s, like execd) and GET /metrics/watch (a `text/event-stream`
// of one JSON object + "\n" about every 2 s). Values come from /proc, so inside a sandbox they describe the host.
import fs from 'node:fs';
import os from 'node:os';
import { goJson, guard, openEventStream, sendJson } from './http.js';

const SAMPLE_MS = 1000;
const WATCH_INTERVAL_MS = 2000;

function cpuTimes() {
  const line = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]; // "cpu  user nice system idle iowait irq softirq steal …"
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = v[3] + (v[4] || 0);
  const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
  return { idle, total };
}

function memory() {
  const info = Object.fromEntries(fs.readFileSync('/proc/meminfo', 'utf8').split('\n').filter(Boolean).map((l) => {
    const [k, rest] = l.split(':');
    return [k, Number.parseInt(rest, 10)]; // kB
  }));
  const total = info.MemTotal / 1024;
  const used = (info.MemTotal - (info.MemAvailable ?? info.MemFree)) / 1024;
  return { total: Math.round(total * 100) / 100, used: Math.round(used * 100) / 100 };
}

/** Samples CPU over `ms` and returns execd's metrics object. */
async function sample(ms = SAMPLE_MS) {
  const a = cpuTimes();
  await new Promise((r) => setTimeout(r, ms));
  const b = cpuTimes();
  const dt = b.total - a.total;
  const pct = dt > 0 ? ((dt - (b.idle - a.idle)) / dt) * 100 : 0;
  const mem = memory();
  return {
    cpu_count: os.availableParallelism?.() ?? os.cpus().length,
    cpu_used_pct: Math.round(pct * 100) / 100,
    mem_total_mib: mem.total,
    mem_used_mib: mem.used,
    timestamp: Date.now(),
  };
}

export function createRoutes() {
  const watchers = new Set();
  return {
    handle(req, res, url) {
      if (req.method !== 'GET') return false;
      if (url.pathname === '/metrics') return guard(res, async () => sendJson(res, 200, await sample())).then(() => true);
      if (url.pathname === '/metrics/watch') {
        openEventStream(res, watchers);
        let stopped = false;
        res.on('close', () => {
          stopped = true;
        });
        (async () => {
          while (!stopped) {
            try {
              const m = await sample(WATCH_INTERVAL_MS);
              if (!stopped) res.write(goJson(m) + '\n');
            } catch (err) {
              if (!stopped) res.write(goJson({ error: String(err.message ?? err) }) + '\n');
            }
          }
        })();
        return true;
      }
      return false;
    },
    close() {
      for (const res of watchers) res.destroy();
    },
  };
}
