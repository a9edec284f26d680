# frozen_string_literal: true

# The installed gem alone runs a sandbox: run with no burrow on PATH and no
# BURROW_* variables (scripts/ruby-sdk.sh runs it as an unprivileged user,
# with the gem in a fresh GEM_HOME). Raises, saying why, if anything fails.
# Usage: ruby self_contained.rb IMAGE
require "burrow"

image = ARGV.fetch(0)
on_path = ENV.fetch("PATH", "").split(":").map { |d| File.join(d, "burrow") }.find { |p| File.executable?(p) }
raise "a burrow binary is on PATH: #{on_path}" if on_path

leftover = ENV.keys.grep(/\ABURROW_/)
raise "BURROW_ variables are set: #{leftover}" unless leftover.empty?

Burrow::Sandbox.create("self-contained", image: image) do |sb|
  out = sb.exec(["sh", "-c", "echo hello from $(id -u)"])
  raise "unexpected: #{out.exit_code} #{out.stdout.inspect}" unless out.exit_code.zero? && out.stdout == "hello from 0\n"

  puts "ok: #{out.stdout.strip} (as uid #{Process.uid})"
end
