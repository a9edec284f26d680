# frozen_string_literal: true

# `sb.ping` from Ruby, N times (median), for scripts/bench-ping.sh.
require "burrow"

image, n = ARGV
n = Integer(n || 2000)
sb = Burrow::Sandbox.create("bench-ping-ruby", image: image, replace: true)
50.times { sb.ping }
t = Array.new(n) do
  s = Process.clock_gettime(Process::CLOCK_MONOTONIC, :float_microsecond)
  sb.ping
  Process.clock_gettime(Process::CLOCK_MONOTONIC, :float_microsecond) - s
end
t.sort!
puts format("ping from Ruby (sb.ping)                    median %.1f us", t[t.size / 2])
sb.destroy
