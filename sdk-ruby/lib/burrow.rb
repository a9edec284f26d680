# frozen_string_literal: true

require "json"
require "base64"
require "burrow_native"
require "burrow/errors"
require "burrow/records"

# burrow: sandboxes that converge by name, sleep when idle and wake on the
# next call. Every call goes to the Rust binding core through the native
# extension (with the GVL released); the core owns every rule and error.
#
# The local backend keeps its state in the burrow home ({configure}, else
# +$BURROW_HOME+); with +$BURROW_URL+ (and +$BURROW_TOKEN+) the calls go to
# a +burrow serve+ instead.
module Burrow
  # The value of a {Target#modify} keyword that was not given.
  UNSET = Object.new.freeze

  # Runs one operation of the core; raises the {Burrow::Error} of a failure.
  # @api private
  def self.call(target, op, data = nil, compact: true)
    op = JSON.generate(compact ? op.compact : op)
    json, object = if Fiber.scheduler && !Fiber.current.blocking?
                     in_thread { Native.call(target, op, data) }
                   else
                     Native.call(target, op, data)
                   end
    answer = JSON.parse(json)
    raise error_from(answer["error"]) if answer.key?("error")

    object || answer["ok"]
  end

  # Under a Fiber scheduler (the async gem), a call waits in a thread of
  # its own: Thread#value hands the fiber back to the scheduler, so the
  # reactor's other fibers run meanwhile. A fiber stopped while it waits
  # (an Async task's stop) kills that thread, which cancels the call.
  # @api private
  def self.in_thread(&block)
    thread = Thread.new do
      Thread.current.report_on_exception = false
      block.call
    end
    thread.value
  ensure
    thread&.kill
  end

  # @return [Array<String>] the core's error codes
  def self.error_codes = Native.error_codes

  # Sets the burrow home of the calls that follow (nil: +$BURROW_HOME+).
  # @return [nil]
  def self.configure(home: nil) = Native.configure(home&.to_s)

  # Calls of this process still running in the core (0 when idle).
  # @return [Integer]
  def self.in_flight = Native.in_flight

  # A command as an argv (a String runs through +sh -c+).
  # @api private
  def self.argv(cmd) = cmd.is_a?(String) ? ["sh", "-c", cmd] : Array(cmd).map(&:to_s)

  # Whether the run with this supervisor was started by this process (the
  # supervisor is its child: the owner the supervisor itself watches).
  # @api private
  def self.started_here?(supervisor_pid)
    return false unless supervisor_pid

    stat = File.read("/proc/#{supervisor_pid}/stat")
    stat[(stat.rindex(")") + 2)..].split[1].to_i == ::Process.pid
  rescue SystemCallError
    false
  end

  @exiting = false
  @exit_hook = false

  # @api private
  def self.exiting? = @exiting

  # Marks the process as exiting once the at_exit handlers run: the
  # finalizers run after them, and then the supervisors see the owner go,
  # so no release is started. Registered at the first owning Sandbox, not
  # at require time, so that it runs after handlers that still work (a
  # test runner runs its tests in an at_exit handler).
  # @api private
  def self.watch_exit
    return if @exit_hook

    @exit_hook = true
    at_exit { @exiting = true }
  end
end

require "burrow/sandbox"
require "burrow/files"
