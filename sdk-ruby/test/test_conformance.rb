# frozen_string_literal: true

# The language-neutral lifecycle cases (tests/conformance/cases.json), one
# test per case id, run by the Ruby interpreter (conformance_runner.rb)
# against real sandboxes through the installed gem.
#
#   BURROW_DRIVER=vm BURROW_CONFORMANCE_TIME_SCALE=3   the vm driver
#   BURROW_TEST_REMOTE=1                                a `burrow serve` per case
require "minitest/autorun"
require "tmpdir"
require "fileutils"
require "net/http"
require "open3"
require_relative "conformance_runner"

IMAGE = ENV.fetch("BURROW_TEST_IMAGE")
REPO_ROOT = ENV.fetch("BURROW_REPO_ROOT", File.expand_path("../..", __dir__))
REMOTE = ENV["BURROW_TEST_REMOTE"] == "1"
DOC = Conformance.load_document

# A `burrow serve` on a fresh home; this process and the race callers it
# spawns use it (through $BURROW_URL) until the block returns. It checks
# that the server really answered the case.
def serve(home)
  bin = ENV.fetch("BURROW_BIN")
  env = { "BURROW_HOME" => home, "BURROW_SERVE_LISTEN" => "127.0.0.1:0", "BURROW_SERVE_IDLE_TIMEOUT" => "0",
          "BURROW_URL" => nil, "BURROW_TOKEN" => nil }
  token, status = Open3.capture2(env, bin, "serve", "token", "create", "tests", "--role", "admin")
  raise "burrow serve token create failed" unless status.success?

  token = token.strip
  out_r, out_w = IO.pipe
  pid = Process.spawn(env, bin, "serve", out: out_w, err: File.join(home, "serve.log"))
  out_w.close
  first = out_r.gets.to_s
  raise "burrow serve did not start: #{first.inspect}" unless first.start_with?("listening on ")

  url = first.delete_prefix("listening on ").strip
  ENV["BURROW_URL"] = url
  ENV["BURROW_TOKEN"] = token
  begin
    yield
    uri = URI("#{url}/metrics")
    res = Net::HTTP.get_response(uri, { "authorization" => "Bearer #{token}" })
    served = res.body[/^burrow_api_requests_total (\d+)/, 1].to_i
    raise Conformance::Failure, "the server answered none of the case's requests" unless served.positive?
  ensure
    ENV.delete("BURROW_URL")
    ENV.delete("BURROW_TOKEN")
    Process.kill(:TERM, pid)
    Process.wait(pid)
    out_r.close
  end
end

# The capability tags of +c+ the backend lacks, as the gem reports them.
def lacking(c)
  caps = Burrow::Sandbox.capabilities
  (c["tags"] || []).select { |t| caps.members.include?(t.to_sym) && !caps[t.to_sym] }
end

# Runs case +c+ on a fresh home (and, remote, a fresh server); a case
# needing a capability the backend lacks is skipped, as the Rust kit
# reports it unsupported (+test+ skips it, when given).
def run_on_fresh_home(c, test = nil)
  home = Dir.mktmpdir("brc", "/tmp")
  run = lambda do |runner_home|
    missing = test ? lacking(c) : []
    test.skip("unsupported by the backend (lacks #{missing.join(', ')})") unless missing.empty?
    Conformance::Runner.new(image: IMAGE, home: runner_home).run_case(c)
  end
  begin
    if REMOTE
      serve(home) { run.(nil) }
    else
      Burrow.configure(home: home)
      run.(home)
    end
  ensure
    Burrow.configure
    FileUtils.rm_rf(home)
  end
end

class TestConformanceFile < Minitest::Test
  def test_the_cases_file_is_well_formed
    assert_equal [], Conformance.validate_cases(DOC, REPO_ROOT)
    areas = DOC["cases"].map { |c| c["id"].split(".").first }.uniq
    %w[convergence identity restart destroy config create input wait drain idle].each do |a|
      assert_includes areas, a, "a case of #{a}"
    end
    assert(DOC["cases"].any? { |c| c["steps"].any? { |s| s["op"] == "race" && s["processes"] } })
  end

  def test_the_runner_knows_the_class_of_every_core_code
    assert_equal Burrow.error_codes.sort, Conformance::CODE_CLASSES.keys.sort
  end

  # The interpreter really fails a case whose expectation is wrong.
  def test_the_runner_fails_a_case_whose_expectation_is_wrong
    find = ->(id) { Marshal.load(Marshal.dump(DOC["cases"].find { |c| c["id"] == id })) }
    wrong = []
    race = find.("convergence.many_callers_one_sandbox") # a race across processes, one start too many
    race["steps"][0]["expect"]["starts"] = 2
    wrong << ["race starts", race]
    strict = find.("create.strict_on_existing_name_is_already_exists") # another error code
    strict["steps"].find { |s| s.dig("expect", "error") == "already_exists" }["expect"]["error"] = "not_found"
    wrong << ["error code", strict]
    life = find.("lifecycle.exec_fs_stop") # a field of a result
    life["steps"].find { |s| s.dig("expect", "stdout").is_a?(String) }["expect"]["stdout"] += "?"
    wrong << ["stdout", life]
    wrong.each do |what, c|
      assert_raises(Conformance::Failure, what) { run_on_fresh_home(c) }
    end
  end
end

class TestConformance < Minitest::Test
  # One after the other, in the file's order (cases share nothing, but the
  # machine's cores are few and the timing bounds assume a quiet one).
  i_suck_and_my_tests_are_order_dependent!

  DOC["cases"].each do |c|
    define_method("test_#{c['id']}") { run_on_fresh_home(c, self) }
  end
end

# The gem reports the backend's capabilities; an operation of one it lacks
# raises UnsupportedError and changes nothing.
class TestCapabilities < Minitest::Test
  def test_the_backend_s_capabilities_and_what_it_lacks
    home = Dir.mktmpdir("brc", "/tmp")
    Burrow.configure(home: home) unless REMOTE
    check = lambda do
      caps = Burrow::Sandbox.capabilities
      assert_equal %i[attached fork full_snapshots idle_reclaim logs metrics modify_live network_policy pause
                      persistent_layer pools published_ports secrets snapshots], caps.members.sort
      # The local engine run by root has every capability; full snapshots
      # (memory and processes) are the vm driver's alone.
      if !REMOTE && Process.euid.zero?
        assert(!caps.full_snapshots || ENV["BURROW_DRIVER"] == "vm", caps.inspect)
        assert(caps.to_h.except(:full_snapshots).values.all?, caps.inspect)
      end
      Burrow::Sandbox.create("caps", image: IMAGE) do |sb|
        if caps.pause
          sb.pause
          sb.resume
        else
          assert_raises(Burrow::UnsupportedError) { sb.pause }
        end
        info = sb.info
        assert_equal [:running, 1], [info.status, info.generation]
      end
    end
    REMOTE ? serve(home) { check.() } : check.()
  ensure
    Burrow.configure
    FileUtils.rm_rf(home)
  end
end
