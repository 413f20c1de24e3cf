// test/fixtures/ws-receiver/cases.txt records what the ws library's receiver (the Node execd's PTY WebSocket) does
// with 250 streams of client frames; test/c/test_xd_wsproto.c holds the C execd's parser to it. This keeps the file
// true: recorded again with the installed ws, it must come out the same (if ws changed, run record.js there).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { record, file } from './fixtures/ws-receiver/record.js';

describe('ws receiver cases (the C execd WebSocket parser\'s reference)', () => {
  it('the recorded events are what the installed ws does', async () => {
    const recorded = fs.readFileSync(file, 'utf8');
    const now = await record();
    assert.equal(now.split('\n').length, 251);
    assert.equal(now, recorded);
  });
});
