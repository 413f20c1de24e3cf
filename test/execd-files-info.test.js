// execd's owner/group name tables (lib/dev-server/execd/files-info.js idTable): parsed once per version of the file,
// a changed file parsed again, a missing one empty. FileInfo owner/group names through a real execd are covered by
// server-files.test.js; this checks the cache on files the test can change (the sandbox's /etc is read-only).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { idTable } from '../lib/dev-server/execd/files-info.js';

describe('execd name tables (idTable)', () => {
  let dir;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osb-idtable-')); });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('parses name:x:id lines, first entry of a name or id wins, comments and bad ids skipped', () => {
    const f = path.join(dir, 'passwd');
    fs.writeFileSync(f, '# comment\nroot:x:0:0::/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\nalias:x:1000:1000::/:/bin/sh\nalice:x:1001:1::/:/bin/sh\nbad:x:zz:0::/:/bin/sh\n\n');
    const t = idTable(f);
    assert.deepEqual([...t.byName], [['root', 0], ['alice', 1000], ['alias', 1000]]);
    assert.deepEqual([...t.byId], [[0, 'root'], [1000, 'alice'], [1001, 'alice']]);
  });

  it('returns the same maps while the file is unchanged and new ones after any change (same size included)', () => {
    const f = path.join(dir, 'group');
    fs.writeFileSync(f, 'staff:x:50:\n');
    const first = idTable(f);
    assert.equal(idTable(f), first, 'unchanged file: the parsed maps are reused');
    fs.writeFileSync(f, 'staff:x:50:\nusers:x:100:\n');
    assert.deepEqual([...idTable(f).byId], [[50, 'staff'], [100, 'users']]);
    // same size, new inode (how useradd and vipw replace the file: write a copy, rename it over)
    const tmp = path.join(dir, 'group.new');
    fs.writeFileSync(tmp, 'staff:x:51:\nusers:x:100:\n');
    fs.renameSync(tmp, f);
    assert.deepEqual([...idTable(f).byId], [[51, 'staff'], [100, 'users']]);
  });

  it('a missing or unreadable file gives empty maps, and a file that appears later is read', () => {
    const f = path.join(dir, 'passwd');
    assert.equal(idTable(f).byName.size, 0);
    fs.mkdirSync(path.join(dir, 'adir'));
    assert.equal(idTable(path.join(dir, 'adir')).byId.size, 0);
    fs.writeFileSync(f, 'bob:x:7:7::/:/bin/sh\n');
    assert.equal(idTable(f).byName.get('bob'), 7);
  });
});
