# frozen_string_literal: true

# Shared by the tests of the installed gem: every test runs on an empty
# burrow home of its own, and destroys what it left there.
require "minitest/autorun"
require "tmpdir"
require "fileutils"
require "burrow"

IMAGE = ENV.fetch("BURROW_TEST_IMAGE")

module FreshHome
  def setup
    @home = Dir.mktmpdir("brt", "/tmp")
    Burrow.configure(home: @home)
  end

  # No call of this process is left running. A finalizer's fire-and-forget
  # release (a garbage-collected handle of an earlier test) may be counted
  # for a moment: waited for (at most 2 s), unlike a call left running.
  def assert_no_call_in_flight
    settled = 100.times.any? { Burrow.in_flight.zero? || (sleep(0.02) && false) }
    assert settled, "#{Burrow.in_flight} calls still in flight"
  end

  def teardown
    # The pools first: their warm sandboxes are never listed.
    Burrow::Sandbox.list_pools.each { |pool| Burrow::Sandbox.remove_pool(pool.name) }
    Burrow::Sandbox.list.sandboxes.each(&:destroy)
    Burrow.configure
    FileUtils.rm_rf(@home)
  end
end
