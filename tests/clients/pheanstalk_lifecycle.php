<?php
// A full job lifecycle driven by PHP's pheanstalk 4 (Debian: php-pda-pheanstalk) against the
// beanstalkd-protocol server at $argv[1] (HOST:PORT). One line per step; a failed
// expectation exits non-zero with the message.
require_once 'Pheanstalk/autoload.php';

use Pheanstalk\Pheanstalk;

function expect(string $what, $got, $want): void
{
    if ($got !== $want) {
        fwrite(STDERR, "$what: expected " . var_export($want, true) . ", got " . var_export($got, true) . "\n");
        exit(1);
    }
    echo "ok $what\n";
}

[$host, $port] = explode(':', $argv[1]);
$client = Pheanstalk::create($host, (int) $port);
$tube = 'php-lifecycle';
$client->useTube($tube)->watchOnly($tube);

$first = $client->put('first', 10, 0, 30);
$later = $client->put('later', 5, 1, 60);
expect('a delayed job counts as delayed', (int) $client->statsTube($tube)['current-jobs-delayed'], 1);

$started = microtime(true);
$job = $client->reserveWithTimeout(5);
expect('reserve gets the ready job', [$job->getId(), $job->getData()], [$first->getId(), 'first']);
$client->touch($job);
expect('touch keeps it reserved', $client->statsJob($job)['state'], 'reserved');
$client->release($job, 1, 0);
expect('release is counted', (int) $client->statsJob($job)['releases'], 1);

$job = $client->reserveWithTimeout(5);
expect('the released job comes first (pri 1)', $job->getId(), $first->getId());
$client->bury($job);
expect('bury buries it', $client->statsJob($job)['state'], 'buried');
expect('peek-buried finds it', $client->peekBuried()->getId(), $first->getId());
expect('kick answers 1', $client->kick(10), 1);
expect('kicked back to ready', $client->statsJob($job)['state'], 'ready');
$client->delete($client->reserveWithTimeout(5));

$next = $client->reserveWithTimeout(5);
$waited = microtime(true) - $started;
expect('the delayed job arrives', $next->getData(), 'later');
if ($waited < 0.9) {
    fwrite(STDERR, "the delayed job came after $waited s, before its delay\n");
    exit(1);
}
$client->delete($next);

$client->put('paused', 0, 0, 60);
$client->pauseTube($tube, 1);
expect('stats-tube shows the pause', (int) $client->statsTube($tube)['pause'], 1);
expect('nothing is handed out of a paused tube', $client->reserveWithTimeout(0), null);
$job = $client->reserveWithTimeout(5);
expect('after the pause the job is handed out', $job->getData(), 'paused');
$client->delete($job);

expect('stats counts the puts', (int) $client->stats()['cmd-put'] >= 3, true);
expect('the tube is listed', in_array($tube, $client->listTubes(), true), true);
expect('reserve-with-timeout 0 on an empty tube times out', $client->reserveWithTimeout(0), null);
echo "lifecycle done\n";
