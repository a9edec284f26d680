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

    def exec(argv, stdin: nil, env: nil, cwd: nil, timeout: nil)
      r = Burrow.call(@native, { op: "exec", argv: Array(argv), env: env, cwd: cwd, timeout: timeout }, stdin)
      ExecResult.new(stdout: Base64.decode64(r["stdout"]), stderr: Base64.decode64(r["stderr"]),
                     exit_code: r["exit_code"], signal: r["signal"], timed_out: r["timed_out"])
    end
  end
end
