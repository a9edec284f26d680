# frozen_string_literal: true

module Burrow
  # The lifecycle calls a Sandbox and a Handle share.
  class Target
    attr_reader :id, :name

    def initialize(native)
      @native = native
      d = JSON.parse(native.describe)
      @id = d["id"]
      @name = d["name"]
      @generation = d["generation"]
    end

    def info = Burrow.call(@native, { op: "info" })
    def status = Burrow.call(@native, { op: "status" }).to_sym
    def stop(grace: nil) = Burrow.call(@native, { op: "stop", grace: grace })
    def kill = Burrow.call(@native, { op: "kill" })
    def request_drain = Burrow.call(@native, { op: "request_drain" })
    def wait_until_stopped = Burrow.call(@native, { op: "wait_until_stopped" })
    def pause = Burrow.call(@native, { op: "pause" })
    def resume = Burrow.call(@native, { op: "resume" })
    def touch = Burrow.call(@native, { op: "touch" }) && nil
    def metrics = Burrow.call(@native, { op: "metrics" })
    def destroy = Burrow.call(@native, { op: "destroy" }) && nil

    def logs(tail: nil, source: nil) = Burrow.call(@native, { op: "logs", tail: tail, source: source&.to_s })

    # Changes the configuration; nil clears cpus, memory, idle_timeout and
    # max_duration. The plan says where each change lands.
    def modify(**changes)
      changes[:memory_mb] = changes.delete(:memory) if changes.key?(:memory)
      Burrow.call(@native, { op: "modify", **changes })
    end

    # Log lines as they are written, until the run stops: an Enumerator
    # without a block.
    def follow_logs(tail: nil, source: nil)
      return enum_for(:follow_logs, tail: tail, source: source) unless block_given?

      cursor = Burrow.call(@native, { op: "follow_logs", tail: tail, source: source&.to_s })
      loop do
        line = begin
          Burrow.call(cursor, { op: "next", call_timeout: 1 })
        rescue Burrow::TimeoutError
          break unless %i[running draining paused starting].include?(status)

          next
        end
        break if line.nil?

        yield line
      end
    end

    def wait_for_status(*statuses, timeout: nil)
      Burrow.call(@native, { op: "wait_for_status", statuses: statuses.flatten.map(&:to_s), call_timeout: timeout })
    end
  end

  # A metadata handle of one sandbox id (it may be stopped).
  class Handle < Target
    def start = Sandbox.new(Burrow.call(@native, { op: "start" }))
    def connect = Sandbox.new(Burrow.call(@native, { op: "connect" }))
    def connect_or_start = Sandbox.new(Burrow.call(@native, { op: "connect_or_start" }))
    def restart = Sandbox.new(Burrow.call(@native, { op: "restart" }))
    def remove = Burrow.call(@native, { op: "remove" }) && nil
  end

  # How a command ended, with its output.
  ExecResult = Struct.new(:stdout, :stderr, :exit_code, :signal, :timed_out, keyword_init: true) do
    def success? = exit_code.zero? && !timed_out
  end

  # A running sandbox, bound to one id and run.
  class Sandbox < Target
    attr_reader :generation

    # Creates and starts the sandbox name (strict: a taken name is
    # AlreadyExistsError). With a block, yields it and destroys it after.
    def self.create(name, **options, &block) = build("create", name, options, &block)

    # Converges: every caller gets the one sandbox of that name.
    def self.connect_or_create(name, **options, &block) = build("connect_or_create", name, options, &block)

    # A handle of the sandbox now named name.
    def self.get(name) = Handle.new(Burrow.call(nil, { op: "get", name: name }))

    # Records of the sandboxes that match.
    def self.list(status: nil, labels: nil)
      Burrow.call(nil, { op: "list", statuses: Array(status).map(&:to_s), labels: labels })
    end

    # Removes the sandbox name (created, stopped or crashed).
    def self.remove(name) = Burrow.call(nil, { op: "remove", name: name }) && nil

    def self.build(mode, name, options)
      options = options.dup
      options[:memory_mb] = options.delete(:memory) if options.key?(:memory)
      sandbox = new(Burrow.call(nil, { op: "build", mode: mode, name: name, **options }))
      return sandbox unless block_given?

      begin
        yield sandbox
      ensure
        sandbox.destroy
      end
    end
    private_class_method :build

    def handle = Handle.new(Burrow.call(@native, { op: "handle" }))
    def ping = Burrow.call(@native, { op: "ping" })
    def detach = Burrow.call(@native, { op: "detach" })
    def restart = Burrow.call(@native, { op: "restart" })

    # File operations (absolute guest paths).
    def fs = Fs.new(@native)

    # Starts argv with streamed output. With a block, yields each chunk as
    # (stream, data) with stream :stdout or :stderr, and returns the exit
    # status; without one, returns the Process.
    def spawn(argv, stdin: nil, env: nil, cwd: nil, timeout: nil, &block)
      native = Burrow.call(@native, { op: "spawn", argv: Array(argv), env: env, cwd: cwd, timeout: timeout,
                                      keep_stdin: stdin.nil? && !block }, stdin)
      process = Process.new(native)
      return process unless block

      begin
        process.each(&block)
        process.exit_status
      ensure
        process.kill unless process.exit_status
      end
    end

    def exec(argv, stdin: nil, env: nil, cwd: nil, timeout: nil)
      r = Burrow.call(@native, { op: "exec", argv: Array(argv), env: env, cwd: cwd, timeout: timeout }, stdin)
      ExecResult.new(stdout: Base64.decode64(r["stdout"]), stderr: Base64.decode64(r["stderr"]),
                     exit_code: r["exit_code"], signal: r["signal"], timed_out: r["timed_out"])
    end
  end
end

module Burrow
  ExitStatus = Struct.new(:exit_code, :signal, :timed_out, keyword_init: true)

  # A command started by Sandbox#spawn.
  class Process
    include Enumerable
    attr_reader :exit_status

    def initialize(native)
      @native = native
      @exit_status = nil
    end

    # Yields (stream, data) for each chunk of output until the exit.
    def each
      return enum_for(:each) unless block_given?

      until @exit_status
        ev = Burrow.call(@native, { op: "next" })
        break if ev.nil?

        if ev["kind"] == "exit"
          @exit_status = ExitStatus.new(exit_code: ev["exit_code"], signal: ev["signal"], timed_out: ev["timed_out"])
        else
          yield ev["kind"].to_sym, Base64.decode64(ev["data"])
        end
      end
    end

    def write(data) = Burrow.call(@native, { op: "write" }, data) && nil
    def close_stdin = Burrow.call(@native, { op: "close_stdin" }) && nil
    def signal(sig) = Burrow.call(@native, { op: "signal", signal: sig }) && nil
    def kill = signal(9)

    # Waits for the exit (output not yet read is discarded).
    def wait
      each { |_stream, _data| nil }
      @exit_status
    end
  end

  # File operations in a running sandbox.
  class Fs
    def initialize(native)
      @native = native
    end

    def read(path) = Base64.decode64(Burrow.call(@native, { op: "fs_read", path: path }))
    def write(path, data, mode: nil) = Burrow.call(@native, { op: "fs_write", path: path, mode: mode }, data) && nil
    def list(path) = Burrow.call(@native, { op: "fs_list", path: path })
    def stat(path) = Burrow.call(@native, { op: "fs_stat", path: path })
    def exist?(path) = Burrow.call(@native, { op: "fs_exists", path: path })
    def mkdir(path, parents: false) = Burrow.call(@native, { op: "fs_mkdir", path: path, parents: parents }) && nil
    def remove(path, recursive: false) = Burrow.call(@native, { op: "fs_remove", path: path, recursive: recursive }) && nil
    def rename(from, to) = Burrow.call(@native, { op: "fs_rename", from: from, to: to }) && nil
  end
end
