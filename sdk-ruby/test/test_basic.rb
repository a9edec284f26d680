# frozen_string_literal: true

# Against the installed gem (scripts/ruby-sdk.sh): never the source tree.
require_relative "fresh_home"
require "timeout"

class TestBasic < Minitest::Test
  include FreshHome

  def test_loaded_from_the_installed_gem
    refute_includes $LOADED_FEATURES.grep(/burrow\.rb\z/).first, "sdk-ruby/lib"
  end

  def test_every_core_code_has_its_class
    assert_equal Burrow.error_codes.sort, Burrow::ERROR_CLASSES.keys.sort
    Burrow::ERROR_CLASSES.each do |code, cls|
      assert_equal code, cls::CODE
      assert_operator cls, :<, Burrow::Error
    end
  end

  def test_tenant_refusals_carry_their_fields
    body = ->(code, fields) { { "code" => code, "message" => "m" }.merge(fields) }
    e = Burrow.error_from(body.("forbidden", "operation" => "pool.create", "reason" => "role viewer"))
    assert_instance_of Burrow::ForbiddenError, e
    assert_equal ["forbidden", "pool.create", "role viewer"], [e.code, e.operation, e.reason]
    e = Burrow.error_from(body.("quota_exceeded", "subject" => "cpus", "limit" => 8, "reason" => "9"))
    assert_instance_of Burrow::QuotaExceededError, e
    assert_equal ["quota_exceeded", "cpus", 8], [e.code, e.subject, e.limit]
    assert_nil e.retry_after
    e = Burrow.error_from(body.("rate_limited", "retry_after_ms" => 1500))
    assert_instance_of Burrow::RateLimitedError, e
    assert_kind_of Burrow::Error, e
    assert_equal ["rate_limited", 1500, 1.5], [e.code, e.retry_after_ms, e.retry_after]
  end

  def test_create_exec_files_spawn
    Burrow::Sandbox.create("rb-basic", image: IMAGE, memory: 256, env: { "WHO" => "ruby" }) do |sb|
      assert_match(/\Asb_/, sb.id)
      assert_equal :running, sb.status
      out = sb.exec(["sh", "-c", "echo $WHO; cat"], stdin: "in")
      assert_equal "ruby\nin", out.stdout
      assert_predicate out, :success?
      sb.fs.write("/tmp/f", "data")
      assert_equal "data", sb.fs.read("/tmp/f")
      refute sb.fs.exist?("/tmp/nope")
      chunks = []
      status = sb.spawn(["sh", "-c", "echo out; echo err >&2"]) { |stream, data| chunks << [stream, data] }
      assert_equal 0, status.exit_code
      assert_includes chunks, [:stdout, "out\n"]
      assert_includes chunks, [:stderr, "err\n"]
    end
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("rb-basic") }
  end

  def test_records_modify_metrics_logs
    sb = Burrow::Sandbox.create("rb-records", image: IMAGE, idle_timeout: 30, labels: { "team" => "a" })
    info = sb.info
    assert_instance_of Burrow::SandboxInfo, info
    assert_equal [:running, 1, false], [info.status, info.generation, info.detached]
    assert_in_delta 30.0, info.config.idle_timeout
    assert_equal({ "team" => "a" }, info.config.labels)
    assert_instance_of Time, info.created_at
    plan = sb.modify(memory: 300, idle_timeout: nil, labels: { "tier" => "b" }, unset_labels: ["team"])
    assert_instance_of Burrow::ModifyPlan, plan
    assert_equal :live, plan.changes.find { |c| c.field == :memory_mb }.applies
    assert_equal 300, plan.info.config.memory
    assert_nil plan.info.config.idle_timeout, "nil clears the idle timeout"
    assert_equal({ "tier" => "b" }, sb.config.labels)
    assert_operator sb.metrics.memory_bytes, :>, 0
    assert_includes sb.fs.list("/").map { |e| [e.name, e.kind] }, ["etc", :dir]
    assert_equal :dir, sb.fs.stat("/etc").kind
    assert(sb.logs(source: :guest).all? { |l| l.source == :guest })
    assert_equal [sb.id], Burrow::Sandbox.list(labels: { "tier" => "b" }).sandboxes.map(&:id)
    assert_empty Burrow::Sandbox.list(status: :stopped).sandboxes
    follower = Thread.new { sb.follow_logs(source: :guest).map(&:text) }
    sb.exec("echo marker-line")
    sleep 0.5
    sb.pause
    assert_equal :paused, sb.status, "the record pause answered is the snapshot"
    assert_equal :paused, sb.info.status
    sb.resume
    stopped = sb.stop
    assert_equal :stopped, stopped.last_run.exit_reason
    lines = follower.value
    assert(lines.any? { |l| l.include?("exec") }, "followed the guest's log until the stop: #{lines}")
  end

  # status is a snapshot read without a call: the status the object was
  # made with, updated by each record a call on that object answers.
  def test_status_is_a_snapshot
    sb = Burrow::Sandbox.create("rb-snap", image: IMAGE)
    handle = Burrow::Sandbox.get("rb-snap")
    listed = Burrow::Sandbox.list.sandboxes.first
    assert_equal [:running, :running, :running], [sb.status, handle.status, listed.status]
    assert_equal sb.id, listed.id
    sb.stop
    assert_equal :stopped, sb.status
    assert_equal :running, handle.status, "another object's snapshot is not refreshed"
    assert_equal :running, listed.status
    assert_equal :stopped, handle.info.status
    assert_equal :stopped, handle.status, "info refreshed it"
    started = listed.start
    assert_equal [:running, :running], [started.status, listed.status]
    assert_equal :running, started.handle.status
    assert_equal :stopped, listed.kill.status
    assert_equal :stopped, listed.status
    assert_equal ["rb-snap"], Burrow::Sandbox.list(status: :stopped).map(&:name)
  end

  def test_memory_is_mib_and_memory_mb_its_alias
    sb = Burrow::Sandbox.create("rb-mem", image: IMAGE, memory_mb: 200)
    assert_equal 200, sb.info.config.memory
    assert_equal 256, sb.modify(memory_mb: 256).info.config.memory
    assert_equal 300, sb.modify(memory: 300).info.config.memory
    assert_raises(ArgumentError) { sb.modify(memory: 1, memory_mb: 1) }
    assert_raises(ArgumentError) { Burrow::Sandbox.create("rb-mem2", image: IMAGE, memory: 1, memory_mb: 1) }
    h = Burrow::Sandbox.define("rb-mem3", image: IMAGE, memory: 128)
    assert_equal [:created, 128], [h.status, h.info.config.memory]
  end

  def test_typed_errors
    e = assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("rb-nobody") }
    assert_equal "not_found", e.code
    assert_equal "rb-nobody", e.name
    assert_raises(Burrow::InvalidNameError) { Burrow::Sandbox.create("no/slash/x", image: IMAGE) }
    sb = Burrow::Sandbox.create("rb-dup", image: IMAGE)
    e = assert_raises(Burrow::AlreadyExistsError) { Burrow::Sandbox.create("rb-dup", image: IMAGE) }
    assert_equal sb.id, e.sandbox_id
    sb.stop
    e = assert_raises(Burrow::InvalidStateError) { sb.exec(["true"]) }
    assert_equal :stopped, e.status
  end

  def test_blocking_calls_release_the_gvl
    Burrow::Sandbox.create("rb-gvl", image: IMAGE) do |sb|
      ticks = 0
      ticker = Thread.new { loop { sleep 0.01; ticks += 1 } }
      sb.exec(%w[sleep 1])
      ticker.kill
      assert_operator ticks, :>, 50, "another thread ran during the exec"
    end
  end

  def test_timeout_cancels_and_leaves_no_orphan
    Burrow::Sandbox.create("rb-timeout", image: IMAGE) do |sb|
      assert_raises(Timeout::Error) { Timeout.timeout(0.5) { sb.exec(%w[sleep 30]) } }
      gone = 100.times.any? { sb.exec(%w[pidof sleep]).exit_code != 0 || (sleep(0.05) && false) }
      assert gone, "the interrupted sleep ended in the guest"
      assert_no_call_in_flight
    end
  end
end
