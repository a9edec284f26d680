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

  def teardown
    Burrow::Sandbox.list.each { |i| Burrow::Sandbox.get_by_id(i.id).destroy }
    Burrow.configure
    FileUtils.rm_rf(@home)
  end
end
