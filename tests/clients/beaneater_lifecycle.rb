# A full job lifecycle driven by Ruby's beaneater (Debian: ruby-beaneater) against the
# beanstalkd-protocol server at ARGV[0] (HOST:PORT). Prints one line per step; any
# failed expectation raises, and ruby exits non-zero with the message.
require 'beaneater'

def expect(what, got, want)
  raise "#{what}: expected #{want.inspect}, got #{got.inspect}" unless got == want
  puts "ok #{what}"
end

client = Beaneater.new(ARGV.fetch(0))
tube = client.tubes['ruby-lifecycle']

# put with priority and delay
first = tube.put('first', pri: 10, ttr: 30)
expect('put answers INSERTED', first[:status], 'INSERTED')
delayed = tube.put('later', pri: 5, delay: 1)
expect('delayed put answers INSERTED', delayed[:status], 'INSERTED')
expect('a delayed job counts as delayed', tube.stats.current_jobs_delayed, 1)

# reserve takes the ready job; the delayed one comes after its delay, not before
client.tubes.watch!('ruby-lifecycle')
job = client.tubes.reserve(5)
expect('reserve gets the ready job', [job.id, job.body], [first[:id], 'first'])
started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
job.touch
expect('touch keeps it reserved', job.stats.state, 'reserved')
job.release(pri: 1, delay: 0)
expect('release makes it ready again', job.stats.state, 'ready')
expect('release is counted', job.stats.releases, 1)

job = client.tubes.reserve(5)
expect('reserve again gets the released job first (pri 1)', job.id, first[:id])
expect('reserves are counted', job.stats.reserves, 2)
job.bury
expect('bury buries it', job.stats.state, 'buried')
expect('the tube counts it buried', tube.stats.current_jobs_buried, 1)
expect('peek buried finds it', tube.peek(:buried).id, first[:id])
kicked = tube.kick(10)
expect('kick answers KICKED 1', [kicked[:status], kicked[:id].to_i], ['KICKED', 1])
expect('kicked back to ready', job.stats.state, 'ready')
expect('kicks are counted', job.stats.kicks, 1)

job = client.tubes.reserve(5)
job.delete
expect('delete removes it', client.jobs.find(first[:id]), nil)

later = client.tubes.reserve(5)
waited = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
expect('the delayed job arrives', later.body, 'later')
raise "the delayed job came after #{waited} s, before its delay" if waited < 0.9
puts "ok the delayed job came after #{waited.round(3)} s"
later.delete

# pause-tube: a ready job in a paused tube is not handed out until the pause ends
tube.put('paused', pri: 0)
paused = tube.pause(1)
expect('pause-tube answers PAUSED', paused[:status], 'PAUSED')
expect('stats-tube shows the pause', tube.stats.pause, 1)
begin
  client.tubes.reserve(0)
  raise 'a job was handed out of a paused tube'
rescue Beaneater::TimedOutError
  puts 'ok nothing is handed out of a paused tube'
end
job = client.tubes.reserve(5)
expect('after the pause the job is handed out', job.body, 'paused')
job.delete

# stats
stats = client.stats
expect('stats counts the puts', stats.cmd_put >= 3, true)
expect('stats counts the pause', stats.cmd_pause_tube >= 1, true)
expect('the tube is listed', client.tubes.all.map(&:name).include?('ruby-lifecycle'), true)
begin
  client.tubes.reserve(0)
  raise 'the tube should be empty'
rescue Beaneater::TimedOutError
  puts 'ok reserve-with-timeout 0 on an empty tube times out'
end
client.close
puts 'lifecycle done'
