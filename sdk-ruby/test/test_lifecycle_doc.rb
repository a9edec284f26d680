# frozen_string_literal: true

# The lifecycle document's Ruby samples (/work/shared/seeds/001_...txt,
# "Lifecycle"; its Microsandbox is Burrow), each exactly as written, in the
# document's order, against real sandboxes through the installed gem
# (scripts/ruby-sdk.sh), with checks of what the text says happens between
# them. The image "python" is the busybox demo rootfs ($BURROW_TEST_IMAGE)
# under that name in a fresh burrow home (images/named/python, a symlink).
#
# The samples are separate snippets of one page, so the glue between them
# (a destroy of the previous "worker", a start where a sample needs a
# running sandbox, a thread that lets a sample's object be collected) is
# the test's, never an edit of a sample. The shapes the document shows in
# other languages only (list, modify, ping, the process policies) are
# checked in their Ruby form after the samples of their section.
require_relative "fresh_home"

class TestLifecycleDoc < Minitest::Test
  include FreshHome

  def setup
    super
    FileUtils.mkdir_p(File.join(@home, "images", "named"))
    File.symlink(IMAGE, File.join(@home, "images", "named", "python"))
  end

  # Removes whatever "worker" (or +name+) is now (glue between samples).
  def gone(name = "worker")
    Burrow::Sandbox.get(name).destroy
  rescue Burrow::NotFoundError
    nil
  end

  # Runs the block in a thread that ends, so that no stack slot of this
  # thread still refers to what it made; its value is plain data.
  def forget(&block) = Thread.new(&block).value

  def collect_until
    40.times do
      GC.start(full_mark: true, immediate_sweep: true)
      return true if yield

      Array.new(10_000) { Object.new } # another chance for the collector
      sleep 0.25
    end
    false
  end

  def test_every_ruby_sample_of_the_lifecycle_document_runs_as_written
    # ---- Create a sandbox
    id, owner, status, was_detached = forget do
      # Local lifecycle-owning handle: sandbox stops when it is collected
      sb = Burrow::Sandbox.create("worker", image: "python")

      info = sb.info
      [sb.id, sb.owner?, info.status, info.detached]
    end
    assert_equal [true, :running, false], [owner, status, was_detached]
    # Nothing refers to that sb any more: collecting it stops the sandbox.
    stopped = collect_until { Burrow::Sandbox.get("worker").status == :stopped }
    assert stopped, "the sandbox of the collected handle was stopped"
    info = Burrow::Sandbox.get("worker").info
    assert_equal [id, :stopped], [info.id, info.last_run.exit_reason]
    gone

    detached_id, owner = forget do
      # Detached: sandbox survives after this handle is released
      detached = Burrow::Sandbox.create("worker", image: "python", detached: true)
      detached.detach

      [detached.id, detached.owner?]
    end
    refute owner
    collected = collect_until { ObjectSpace.each_object(Burrow::Sandbox).none? { |s| s.id == detached_id } }
    assert collected, "the detached handle was collected"
    sleep 1 # a release would have been started by now
    info = Burrow::Sandbox.get("worker").info
    assert_equal [detached_id, :running, true], [info.id, info.status, info.detached]
    # It named no memory: the host's default where the host holds one.
    created_memory = info.config.memory

    # ---- Converge on a named sandbox: the running detached worker is
    # connected to, its own configuration winning over memory: 1024.
    sb = Burrow::Sandbox.connect_or_create(
      "worker",
      image: "python",
      memory: 1024
    )

    assert_equal detached_id, sb.id
    kept = sb.info.config.memory
    if created_memory.nil?
      assert_nil kept, "the existing sandbox keeps its configuration"
    else
      assert_equal created_memory, kept, "the existing sandbox keeps its configuration"
    end
    refute_equal 1024, kept
    refute_predicate sb, :owner?, "connected to, not started here"

    handle = Burrow::Sandbox.get("worker")
    sb = handle.connect_or_start

    assert_equal :running, handle.status
    assert_equal [detached_id, :running], [sb.id, sb.status]

    # When the name is missing, the same sample creates, with the memory.
    gone
    sb = Burrow::Sandbox.connect_or_create(
      "worker",
      image: "python",
      memory: 1024
    )

    assert_equal 1024, sb.info.config.memory
    assert_predicate sb, :owner?
    id = sb.id

    # ---- Stop and restart
    sb.stop

    assert_equal :stopped, sb.status, "the stop's record is the snapshot"
    assert_equal :stopped, Burrow::Sandbox.get("worker").status

    # Later, resume where you left off
    sb = Burrow::Sandbox.start("worker")

    assert_equal id, sb.id, "the same sandbox, started again"
    assert_equal [:running, :running], [sb.status, sb.info.status]
    assert_equal 1024, sb.info.config.memory, "with its configuration"
    e = assert_raises(Burrow::InvalidStateError) { Burrow::Sandbox.start("worker") }
    assert_equal :running, e.status
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.start("nobody") }
    # restart: the same id, the next run, graceful by default.
    generation = sb.generation
    info = sb.restart
    assert_equal [id, generation + 1, :running], [info.id, info.generation, sb.status]

    # ---- Configuration (no Ruby sample; the Ruby form of the others')
    plan = sb.modify(cpus: 4, memory: 4096)
    assert_equal %i[cpus memory_mb], plan.changes.map(&:field).sort
    assert_equal [4.0, 4096], [plan.info.config.cpus, plan.info.config.memory]

    # ---- Ping and touch (the Ruby form)
    ping = sb.ping
    assert_instance_of Float, ping.latency
    assert_operator ping.latency, :>, 0
    assert_operator ping.latency, :<, 5, "seconds"
    assert_nil sb.touch

    # ---- Wait until stopped (a drain stops it: nothing runs)
    sb.request_drain
    result = sb.wait_until_stopped

    assert_equal [:stopped, :drain], [result.status, result.last_run.exit_reason]
    assert_equal :stopped, sb.status

    # ---- Destroy
    sb = Burrow::Sandbox.start("worker")
    stale = Burrow::Sandbox.get("worker")
    sb.destroy

    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("worker") }

    # ---- Remove (a stopped sandbox). The new worker is another identity:
    # the stale handle refuses it (a Burrow::Error).
    Burrow::Sandbox.create("worker", image: "python").stop
    e = assert_raises(Burrow::SandboxReplacedError) { stale.info }
    assert_kind_of Burrow::Error, e
    assert_equal stale.id, e.sandbox_id
    Burrow::Sandbox.remove("worker")

    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("worker") }

    # ---- List and inspect (the Ruby form): one running, one stopped.
    running = Burrow::Sandbox.create("worker", image: "python")
    Burrow::Sandbox.create("idle", image: "python").stop
    page = Burrow::Sandbox.list
    assert_instance_of Burrow::SandboxPage, page
    page.sandboxes.each { |h| assert_instance_of Burrow::Handle, h }
    listed = page.sandboxes.map { |h| [h.name, h.status] }.sort
    assert_equal [["idle", :stopped], ["worker", :running]], listed
    assert_equal ["idle"], Burrow::Sandbox.list(status: :stopped).sandboxes.map(&:name)
    worker = page.sandboxes.find { |h| h.name == "worker" }
    assert_equal running.id, worker.id
    assert_equal :running, worker.info.status, "a listed handle acts on its sandbox"
    gone
    gone("idle")

    # ---- Sandbox process policies (the Ruby form): numbers are seconds.
    sb = Burrow::Sandbox.create("worker", image: "python", max_duration: 3600, idle_timeout: 300)
    config = sb.info.config
    assert_equal [3600.0, 300.0], [config.max_duration, config.idle_timeout]
    gone
    assert_raises(Burrow::InvalidArgumentError) { Burrow::Sandbox.create("worker", image: "python", idle_timeout: -5) }
    assert_raises(Burrow::NotFoundError) { Burrow::Sandbox.get("worker") }
  end
end
