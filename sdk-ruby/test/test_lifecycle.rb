# frozen_string_literal: true

# Ownership, fork, interrupts and errors of the Ruby SDK, against real
# sandboxes through the installed gem (scripts/ruby-sdk.sh).
require_relative "fresh_home"
require "open3"
require "rbconfig"
require_relative "tiny_scheduler"

class TestLifecycle < Minitest::Test
  include FreshHome

  # A Ruby child process running +script+ (with the gem loaded and the
  # home of this test); its stdout, one line at a time.
  def child(script)
    code = "require 'burrow'\n$stdout.sync = true\nIMAGE = #{IMAGE.inspect}\n#{script}"
    Open3.popen2({ "BURROW_HOME" => @home }, RbConfig.ruby, "-e", code)
  end

  def stopped_info(name, timeout: 30)
    Burrow::Sandbox.get(name).wait_for_status(:stopped, :crashed, timeout: timeout)
  end

  def test_an_attached_sandbox_stops_when_its_owner_is_sigkilled
    stdin, stdout, wait = child(<<~RUBY)
      sb = Burrow::Sandbox.create("rb-owned", image: IMAGE)
      puts sb.id
      sleep
    RUBY
    id = stdout.gets.to_s.strip
    assert_match(/\Asb_/, id)
    assert_equal :running, Burrow::Sandbox.get("rb-owned").status
    Process.kill(:KILL, wait.pid)
    refute_predicate wait.value, :success?
    info = stopped_info("rb-owned")
    assert_equal id, info.id
    assert_equal :stopped, info.status
    assert_equal :owner_exited, info.last_run.exit_reason
  ensure
    stdin&.close
  end

  def test_a_detached_sandbox_outlives_its_creator
    _stdin, stdout, wait = child(<<~RUBY)
      sb = Burrow::Sandbox.create("rb-detached", image: IMAGE, detached: true)
      puts sb.owner?
      Process.kill(:KILL, Process.pid)
    RUBY
    assert_equal "false", stdout.gets.to_s.strip
    wait.value
    # The supervisor would have seen the exit by now (it watches a pidfd).
    assert_raises(Burrow::TimeoutError) { Burrow::Sandbox.get("rb-detached").wait_for_status(:stopped, timeout: 2) }
    assert_equal :running, Burrow::Sandbox.get("rb-detached").status
  end

  # Runs the block in a thread that ends, so that no stack slot of this
  # thread still refers to what it made; its value is plain data.
  def forget(&block)
    Thread.new(&block).value
  end

  def collect_until
    40.times do
      GC.start(full_mark: true, immediate_sweep: true)
      return true if yield

      Array.new(10_000) { Object.new } # another chance for the collector
      sleep 0.25
    end
    false
  end

  def test_garbage_collecting_the_owning_sandbox_stops_its_run
    assert forget { Burrow::Sandbox.create("rb-gc", image: IMAGE).owner? }, "create owns the run it starts"
    stopped = collect_until { Burrow::Sandbox.get("rb-gc").status == :stopped }
    assert stopped, "the run of the collected owner was stopped"
    assert_equal :stopped, Burrow::Sandbox.get("rb-gc").info.last_run.exit_reason
  end

  def test_collecting_a_non_owner_stops_nothing
    keep = Burrow::Sandbox.create("rb-keep", image: IMAGE)
    assert_predicate keep, :owner?
    owners = forget do
      # Another object of the run this process started does not own it
      # (one owner per run); a detached run has no owner; detach lets go.
      other = Burrow::Sandbox.connect_or_create("rb-keep", image: IMAGE).owner?
      connected = Burrow::Sandbox.get("rb-keep").connect.owner?
      detached = Burrow::Sandbox.create("rb-free", image: IMAGE, detached: true).owner?
      owned = Burrow::Sandbox.create("rb-let-go", image: IMAGE)
      before = owned.owner?
      owned.detach
      [other, connected, detached, before, owned.owner?]
    end
    assert_equal [false, false, false, true, false], owners
    collected = collect_until { ObjectSpace.each_object(Burrow::Sandbox).none? { |s| s.name != "rb-keep" } }
    assert collected, "the objects were collected"
    sleep 1 # a release would have been started by now
    %w[rb-keep rb-free rb-let-go].each { |n| assert_equal :running, Burrow::Sandbox.get(n).status, n }
    # An owner that restarted its sandbox owns the new run.
    gen = keep.restart.generation
    assert_equal gen, keep.generation
    assert_predicate keep, :owner?
  end

  def test_an_owner_in_another_process_is_not_an_owner_here
    stdin, stdout, wait = child(<<~RUBY)
      sb = Burrow::Sandbox.create("rb-theirs", image: IMAGE)
      puts sb.owner?
      $stdin.gets
    RUBY
    assert_equal "true", stdout.gets.to_s.strip
    refute_predicate Burrow::Sandbox.connect_or_create("rb-theirs", image: IMAGE), :owner?
    # The child's exit stops it (owner_exited), not this process.
    stdin.close
    assert_predicate wait.value, :success?
    assert_equal :owner_exited, stopped_info("rb-theirs").last_run.exit_reason
  end

  def test_a_fork_child_builds_its_own_runtime
    sb = Burrow::Sandbox.create("rb-fork", image: IMAGE)
    assert_equal "before\n", sb.exec("echo before").stdout
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      # The parent's objects work in the child (by id, on the child's own
      # runtime and connections), and new ones too.
      out = sb.exec("echo child").stdout
      own = Burrow::Sandbox.create("rb-fork-child", image: IMAGE, detached: true)
      writer.puts(JSON.generate([out, own.exec("echo own").stdout, Burrow.in_flight]))
      writer.close
      exit!(0) # no at_exit (minitest), no finalizers
    end
    writer.close
    got = JSON.parse(reader.read)
    _, status = Process.wait2(pid)
    assert_predicate status, :success?
    assert_equal ["child\n", "own\n", 0], got
    # The parent goes on with its own runtime; the child's exit stopped
    # nothing of the parent's (the parent owns rb-fork).
    assert_equal "after\n", sb.exec("echo after").stdout
    assert_equal :running, sb.info.status
    assert_equal :running, Burrow::Sandbox.get("rb-fork-child").status
  end

  def test_ctrl_c_cancels_a_waiting_call
    _stdin, stdout, wait = child(<<~RUBY)
      # Ruby's own Ctrl-C handling (raise Interrupt), also where this test
      # runs in the background of a non-interactive shell, which starts its
      # children with SIGINT ignored.
      trap("INT", "DEFAULT")
      sb = Burrow::Sandbox.create("rb-int", image: IMAGE, detached: true)
      puts "ready"
      begin
        sb.exec(%w[sleep 30])
        puts "not interrupted"
      rescue Interrupt
        puts "interrupted \#{Burrow.in_flight}"
      end
    RUBY
    assert_equal "ready", stdout.gets.to_s.strip
    sb = Burrow::Sandbox.get("rb-int").connect
    # The exec has started in the guest before the interrupt.
    assert(100.times.any? { sb.exec("pidof sleep").success? || (sleep(0.05) && false) })
    Process.kill(:INT, wait.pid)
    assert_equal "interrupted 0", stdout.gets.to_s.strip
    assert_predicate wait.value, :success?
    gone = 100.times.any? { !sb.exec("pidof sleep").success? || (sleep(0.05) && false) }
    assert gone, "the interrupted command ended in the guest"
  end

  def test_thread_raise_cancels_a_waiting_call
    Burrow::Sandbox.create("rb-raise", image: IMAGE) do |sb|
      t = Thread.new { sb.exec(%w[sleep 30]) }
      t.report_on_exception = false
      sleep 0.1 until sb.exec("pidof sleep").success?
      t.raise(RuntimeError, "stop waiting")
      assert_raises(RuntimeError) { t.join }
      gone = 100.times.any? { !sb.exec("pidof sleep").success? || (sleep(0.05) && false) }
      assert gone, "the command ended in the guest"
      assert_no_call_in_flight
    end
  end

  # Under a Fiber scheduler a call does not block the reactor: another
  # fiber of the same thread runs while an exec waits.
  def test_calls_under_a_fiber_scheduler_let_other_fibers_run
    Burrow::Sandbox.create("rb-fiber", image: IMAGE) do |sb|
      ticks_during = nil
      out = nil
      Thread.new do
        Fiber.set_scheduler(TinyScheduler.new)
        done = false
        Fiber.schedule do
          out = sb.exec("sleep 1; echo slept").stdout
          done = true
        end
        Fiber.schedule do
          ticks = 0
          until done
            sleep 0.01
            ticks += 1
          end
          ticks_during = ticks
        end
      end.join
      assert_equal "slept\n", out
      assert_operator ticks_during, :>, 30, "the other fiber ran during the exec"
      assert_no_call_in_flight
    end
  end

  def test_errors_of_the_core_are_typed
    e = assert_raises(Burrow::InvalidArgumentError) { Burrow::Sandbox.create("rb-bad", image: IMAGE, colour: "red") }
    assert_equal "invalid_argument", e.code
    assert_empty Burrow::Sandbox.list.sandboxes, "a refused create changes nothing"
    e = assert_raises(Burrow::InvalidNameError) { Burrow::Sandbox.create("a" * 200, image: IMAGE) }
    assert_equal "invalid_name", e.code
    sb = Burrow::Sandbox.create("rb-err", image: IMAGE)
    e = assert_raises(Burrow::GuestError) { sb.exec(["/no/such/program"]) }
    assert_equal "not_found", e.guest["code"]
    e = assert_raises(Burrow::TimeoutError) { sb.wait_for_status(:stopped, timeout: 0.2) }
    assert_equal "timeout", e.code
    # A new sandbox under the name: the old object never acts on it.
    sb.destroy
    fresh = Burrow::Sandbox.create("rb-err", image: IMAGE)
    e = assert_raises(Burrow::SandboxReplacedError) { sb.exec("true") }
    assert_equal sb.id, e.sandbox_id
    assert_equal fresh.id, e.actual_id
    assert_raises(Burrow::InvalidStateError) { fresh.handle.remove }
  end

  def test_a_panic_of_the_core_is_an_io_error
    _stdin, stdout, wait = Open3.popen2({ "BURROW_HOME" => @home, "BURROW_FAULT" => "binding.panic", "RUST_BACKTRACE" => "0" }, RbConfig.ruby,
                                        "-e", <<~RUBY, err: File::NULL)
                                          require "burrow"
                                          begin
                                            Burrow::Sandbox.list
                                          rescue Burrow::IOError => e
                                            puts e.code
                                          end
                                          puts Burrow::Sandbox.list.class rescue puts "again"
                                        RUBY
    assert_equal "io", stdout.gets.to_s.strip
    assert_equal "again", stdout.gets.to_s.strip
    assert_predicate wait.value, :success?
  end
end
