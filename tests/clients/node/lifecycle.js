// A full job lifecycle driven by the Node.js client node-beanstalk (pinned in package.json,
// installed by scripts/setup with `npm ci`) against the beanstalkd-protocol server at
// argv[2] (HOST:PORT). Prints one line per step; any failed expectation throws, and node
// exits non-zero with the message.
'use strict';

const assert = require('assert');
const { Client, BeanstalkJobState } = require('node-beanstalk');

const TUBE = 'node-lifecycle';

function expect(what, got, want) {
  assert.deepStrictEqual(got, want, `${what}: expected ${JSON.stringify(want)}, got ${JSON.stringify(got)}`);
  console.log(`ok ${what}`);
}

function seconds() {
  return Number(process.hrtime.bigint()) / 1e9;
}

async function until(what, condition, timeoutSeconds = 5) {
  const deadline = seconds() + timeoutSeconds;
  while (!(await condition())) {
    assert(seconds() < deadline, `${what}: not within ${timeoutSeconds} s`);
    await new Promise((resolve) => setTimeout(resolve, 10)); // polling, bounded by the deadline
  }
  console.log(`ok ${what}`);
}

async function lifecycle(client) {
  await client.use(TUBE);
  expect('watch answers the watch count', await client.watch(TUBE), 2);
  expect('ignore default answers true', await client.ignore('default'), true);
  expect('the watch list is the tube', await client.listTubesWatched(), [TUBE]);
  expect('ignoring the last watched tube is refused', await client.ignore(TUBE), false);

  // put with priority and delay (payloads go through node-beanstalk's JSON serializer)
  const first = await client.put({ n: 'first' }, 30, 10);
  expect('put makes a ready job', first.state, BeanstalkJobState.ready);
  const delayed = await client.put({ n: 'later' }, 30, 5, 1);
  expect('a delayed put makes a delayed job', delayed.state, BeanstalkJobState.delayed);
  expect('the tube counts it delayed', (await client.statsTube(TUBE))['current-jobs-delayed'], 1);
  expect('peek-delayed finds it', (await client.peekDelayed()).id, delayed.id);

  // reserve takes the ready job; the delayed one comes after its delay, not before
  let job = await client.reserveWithTimeout(5);
  expect('reserve gets the ready job', [job.id, job.payload], [first.id, { n: 'first' }]);
  const started = seconds();
  expect('touch answers true', await client.touch(job.id), true);
  let stats = await client.statsJob(job.id);
  expect('touch keeps it reserved', [stats.state, stats.tube, stats.pri, stats.ttr],
    [BeanstalkJobState.reserved, TUBE, 10, 30]);
  expect('release with priority 1 makes it ready', await client.release(job.id, 1, 0), BeanstalkJobState.ready);
  stats = await client.statsJob(job.id);
  expect('release is counted, with the new priority', [stats.state, stats.releases, stats.pri],
    [BeanstalkJobState.ready, 1, 1]);

  job = await client.reserveWithTimeout(5);
  expect('reserve again gets the released job first (pri 1)', job.id, first.id);
  expect('reserves are counted', (await client.statsJob(job.id)).reserves, 2);
  expect('bury answers true', await client.bury(job.id, 7), true);
  stats = await client.statsJob(job.id);
  expect('bury buries it, with its priority', [stats.state, stats.pri, stats.buries],
    [BeanstalkJobState.buried, 7, 1]);
  expect('the tube counts it buried', (await client.statsTube(TUBE))['current-jobs-buried'], 1);
  expect('peek-buried finds it', (await client.peekBuried()).id, first.id);
  expect('kick answers the count kicked', await client.kick(10), 1);
  stats = await client.statsJob(job.id);
  expect('kicked back to ready, and counted', [stats.state, stats.kicks], [BeanstalkJobState.ready, 1]);
  expect('peek-ready finds it', (await client.peekReady()).payload, { n: 'first' });

  job = await client.reserveWithTimeout(5);
  expect('delete answers true', await client.delete(job.id), true);
  expect('a deleted job is not found', await client.peek(first.id), null);
  expect('deleting it again answers false', await client.delete(first.id), false);

  const later = await client.reserveWithTimeout(5);
  const waited = seconds() - started;
  expect('the delayed job arrives', [later.id, later.payload], [delayed.id, { n: 'later' }]);
  assert(waited >= 0.9, `the delayed job came after ${waited} s, before its delay`);
  console.log(`ok the delayed job came after ${waited.toFixed(3)} s`);
  expect('delete the delayed job', await client.delete(later.id), true);

  // kick-job: a buried job by its id
  const kickable = await client.put({ n: 'kickable' }, 30, 0);
  job = await client.reserveWithTimeout(5);
  expect('reserve gets it', job.id, kickable.id);
  await client.bury(job.id, 0);
  expect('kick-job answers true', await client.kickJob(kickable.id), true);
  expect('kick-job made it ready', (await client.statsJob(kickable.id)).state, BeanstalkJobState.ready);
  expect('delete a ready job', await client.delete(kickable.id), true);

  // reserve-job (new in 1.12) takes a job by its id, out of priority order; release with a
  // delay makes it delayed
  const urgent = await client.put({ n: 'urgent' }, 30, 0);
  const chosen = await client.put({ n: 'chosen' }, 30, 100);
  job = await client.reserveJob(chosen.id);
  expect('reserve-job gets the job asked for', [job.id, job.payload], [chosen.id, { n: 'chosen' }]);
  expect('release with a delay makes it delayed', await client.release(chosen.id, 100, 1),
    BeanstalkJobState.delayed);
  expect('reserve-job of a missing job is not found', await client.reserveJob(first.id), null);
  expect('delete the urgent job', await client.delete(urgent.id), true);
  expect('delete the delayed job', await client.delete(chosen.id), true);

  // a reserve waiting on one connection is answered by a put on another
  const waiter = await connected(client.host, client.port);
  try {
    await waiter.watch(TUBE);
    const waiting = waiter.reserveWithTimeout(5);
    await until('the server counts the waiter', async () => (await client.statsTube(TUBE))['current-waiting'] === 1);
    const woken = await client.put({ n: 'wake' }, 30, 0);
    job = await waiting;
    expect('a waiting reserve gets the job put meanwhile', [job.id, job.payload], [woken.id, { n: 'wake' }]);
    expect('the waiter deletes it', await waiter.delete(job.id), true);
  } finally {
    await waiter.disconnect();
  }

  // pause-tube: a ready job in a paused tube is not handed out until the pause ends
  await client.put({ n: 'paused' }, 30, 0);
  expect('pause-tube answers true', await client.pauseTube(TUBE, 1), true);
  const tubeStats = await client.statsTube(TUBE);
  expect('stats-tube shows the pause', [tubeStats.pause, tubeStats['cmd-pause-tube']], [1, 1]);
  expect('nothing is handed out of a paused tube', await client.reserveWithTimeout(0), null);
  job = await client.reserveWithTimeout(5);
  expect('after the pause the job is handed out', job.payload, { n: 'paused' });
  await client.delete(job.id);

  // stats
  const serverStats = await client.stats();
  expect('stats counts the puts', serverStats['cmd-put'] >= 4, true);
  expect('stats counts the pause', serverStats['cmd-pause-tube'] >= 1, true);
  expect('stats shows the protocol version', typeof serverStats.version, 'string');
  expect('the tube is listed', (await client.listTubes()).includes(TUBE), true);
  expect('the tube is used', await client.listTubeUsed(), TUBE);
  expect('a missing tube has no stats', await client.statsTube('node-no-such-tube'), null);
  expect('reserve-with-timeout 0 on an empty tube times out', await client.reserveWithTimeout(0), null);
}

async function connected(host, port) {
  const client = new Client({ host, port });
  client.host = host;
  client.port = port;
  await client.connect();
  return client;
}

async function main() {
  const [host, port] = process.argv[2].split(':');
  const client = await connected(host, Number(port));
  try {
    await lifecycle(client);
  } finally {
    await client.disconnect();
  }
  console.log('lifecycle done');
}

main().catch((error) => {
  console.error(error.stack || String(error));
  process.exit(1);
});
