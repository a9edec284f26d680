# frozen_string_literal: true

# The smallest Fiber scheduler the tests need (the async gem cannot be
# installed here: the gem registry is out of reach): sleeping fibers, and
# fibers blocked on a Thread#join/#value or a Mutex, woken from any thread.
# Its loop runs when the scheduler is closed (at the end of the thread that
# set it).
class TinyScheduler
  def initialize
    @sleepers = {} # fiber => wake-up time
    @blocked = {}  # fiber => deadline (nil: none)
    @ready = []
    @lock = Thread::Mutex.new
    @wake_r, @wake_w = IO.pipe
  end

  def fiber(&block)
    f = Fiber.new(blocking: false, &block)
    f.resume
    f
  end

  def kernel_sleep(duration = nil)
    @sleepers[Fiber.current] = duration ? now + duration : nil
    Fiber.yield
  end

  def block(_blocker, timeout = nil)
    @blocked[Fiber.current] = timeout && now + timeout
    Fiber.yield
  end

  # May be called from another thread.
  def unblock(_blocker, fiber)
    @lock.synchronize { @ready << fiber }
    @wake_w.write_nonblock(".", exception: false)
  end

  def io_wait(io, events, timeout)
    readers = events.anybits?(IO::READABLE) ? [io] : nil
    writers = events.anybits?(IO::WRITABLE) ? [io] : nil
    IO.select(readers, writers, nil, timeout) ? events : false
  end

  def close
    run
    @wake_r.close
    @wake_w.close
  end

  private

  def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  def run
    until @sleepers.empty? && @blocked.empty? && @ready.empty?
      ready = @lock.synchronize { @ready.slice!(0..) }
      ready.each { |f| resume(f) }
      t = now
      @sleepers.select { |_, at| at && at <= t }.each_key { |f| resume(f) }
      @blocked.select { |_, at| at && at <= t }.each_key { |f| resume(f) }
      deadlines = (@sleepers.values + @blocked.values).compact
      wait = deadlines.empty? ? 1 : [deadlines.min - now, 0].max
      @wake_r.read_nonblock(64, exception: false) if IO.select([@wake_r], nil, nil, wait)
    end
  end

  def resume(fiber)
    @sleepers.delete(fiber)
    @blocked.delete(fiber)
    fiber.resume if fiber.alive?
  end
end
