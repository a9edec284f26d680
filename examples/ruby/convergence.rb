# frozen_string_literal: true

# Many processes, one sandbox: N forked processes call connect_or_create on
# the same name at once and all get the same id.
# Usage (after installing the gem): BURROW_IMAGE=python ruby convergence.rb [N]
require "burrow"

NAME = "converge-rb"
image = ENV.fetch("BURROW_IMAGE", "python")
n = Integer(ARGV.fetch(0, "8"))

# A leftover of an earlier run. This call also builds the parent's runtime
# before the forks: each child builds its own on its first call.
begin
  Burrow::Sandbox.get(NAME).destroy
rescue Burrow::NotFoundError
  nil
end

children = Array.new(n) do
  reader, writer = IO.pipe
  pid = fork do
    reader.close
    # detached: true, or the sandbox would stop when the process that
    # started it exits (this child, in a moment).
    sb = Burrow::Sandbox.connect_or_create(NAME, image: image, detached: true)
    puts "process #{Process.pid}: #{sb.id} (generation #{sb.generation})"
    writer.puts("#{sb.id} #{sb.generation}")
  end
  writer.close
  [pid, reader]
end

answers = children.map do |pid, reader|
  line = reader.read
  reader.close
  _, status = Process.wait2(pid)
  abort "child #{pid} failed: #{status}" unless status.success?
  line.split
end

ids = answers.map(&:first).uniq
generations = answers.map { |a| Integer(a[1]) }.uniq
puts "#{n} processes converged on #{ids} (generation #{generations})"
Burrow::Sandbox.get(NAME).destroy
exit(ids.size == 1 ? 0 : 1)
