# frozen_string_literal: true

# The Ruby quickstart: a sandbox, a ping, a command, a file, a streamed
# command, a stop, a start by name and a listing. The block form of create
# destroys the sandbox when the block ends.
# Usage (after installing the gem): BURROW_IMAGE=python ruby quickstart.rb
require "burrow"

image = ENV.fetch("BURROW_IMAGE", "python")

# replace: true destroys a sandbox of that name left by an earlier run.
# best_effort_limits: the memory limit is enforced where the host can
# (root, or a delegated cgroup), else the sandbox runs without it.
Burrow::Sandbox.create("quickstart-rb", image: image, memory: 256, best_effort_limits: true,
                                       replace: true) do |sb|
  puts "#{sb.name} (#{sb.id}) is #{sb.status}" # a snapshot: no call
  puts format("agent reachable in %.2f ms", sb.ping.latency * 1000) # latency: Float seconds

  out = sb.exec(["echo", "hello from the sandbox"])
  print out.stdout # exit_code, signal, timed_out; a non-zero exit is not an exception

  sb.fs.write("/tmp/note.txt", "some text")
  puts "read back: #{sb.fs.read("/tmp/note.txt")}"

  # A String runs through sh -c; the block gets each chunk as it comes.
  status = sb.spawn("for i in 1 2 3; do echo tick $i; sleep 0.2; done; echo done >&2") do |stream, data|
    data.each_line { |line| puts "[#{stream}] #{line}" }
  end
  puts "spawn ended: exit code #{status.exit_code}"

  info = sb.stop
  puts "stopped: #{info.status} (#{info.last_run&.exit_reason})"

  # Later, resume where you left off: the same sandbox, its configuration kept.
  again = Burrow::Sandbox.start("quickstart-rb")
  abort "not the same sandbox" unless again.id == sb.id
  puts "started again: #{again.id}, generation #{again.generation}, #{again.info.config.memory} MiB"
  Burrow::Sandbox.list.sandboxes.each { |h| puts "listed: #{h.name}: #{h.status}" }
end

begin
  Burrow::Sandbox.get("quickstart-rb")
rescue Burrow::NotFoundError
  puts "destroyed"
end
