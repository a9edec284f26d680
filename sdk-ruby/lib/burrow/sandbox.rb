# frozen_string_literal: true

module Burrow
  # The lifecycle calls a {Sandbox} and a {Handle} share. Every call goes to
  # the core with the GVL released.
  class Target
    # @return [String] the sandbox id (+sb_...+), fixed for its life
    attr_reader :id
    # @return [String] the name it was created with
    attr_reader :name
    # The status as this object last saw it, without a call: the one it was
    # made with (a lookup's, a list's, a start's), updated whenever a call
    # on this object answers a fresh record ({#info}, {#stop}, {#kill},
    # {#wait_until_stopped}, {#modify}, ...). The status now is +info.status+.
    # @return [Symbol] +:created+, +:starting+, +:running+, +:draining+,
    #   +:paused+, +:stopped+ or +:crashed+
    attr_reader :status

    # @api private
    # @param status [String, Symbol, nil] the snapshot (nil: the one the
    #   core made the object with)
    def initialize(native, status: nil)
      @native = native
      d = JSON.parse(native.describe)
      @id = d["id"]
      @name = d["name"]
      @status = (status || d["status"])&.to_sym
    end

    # A fresh read of the record (it updates {#status}).
    # @return [SandboxInfo] the record as it is now
    def info = record(op: "info")

    # @return [SandboxConfig] the stored configuration
    def config = info.config

    # Graceful stop (SIGTERM, then SIGKILL after +grace+ seconds).
    # Idempotent: a sandbox that is not running is answered as it is.
    # @param grace [Numeric, nil] seconds (nil: the default)
    # @return [SandboxInfo]
    def stop(grace: nil) = record(op: "stop", grace: grace)

    # Immediate stop (idempotent).
    # @return [SandboxInfo]
    def kill = record(op: "kill")

    # Refuses new work; the sandbox stops when what runs has finished.
    # @return [SandboxInfo]
    def request_drain = record(op: "request_drain")

    # Waits until the current run ends.
    # @return [SandboxInfo]
    def wait_until_stopped = record(op: "wait_until_stopped")

    # Waits until the status is one of +statuses+.
    # @param statuses [Array<Symbol, String>]
    # @param timeout [Numeric, nil] seconds, then {TimeoutError}
    # @return [SandboxInfo]
    def wait_for_status(*statuses, timeout: nil)
      record(op: "wait_for_status", statuses: statuses.flatten.map(&:to_s), call_timeout: timeout)
    end

    # Freezes every process of the sandbox.
    # @return [SandboxInfo]
    def pause = record(op: "pause")

    # Thaws a paused sandbox.
    # @return [SandboxInfo]
    def resume = record(op: "resume")

    # Activity now: keeps an idle timeout from stopping it.
    # @return [nil]
    def touch = call(op: "touch") && nil

    # @return [Metrics] resource usage of the running sandbox
    def metrics = Metrics.from_json(call(op: "metrics"))

    # Saves the sandbox under +name+: its files (its writable layer over
    # its image, usable as the image +"snapshot:NAME"+), or with
    # +kind: :full+ a running vm sandbox whole. A running sandbox is frozen
    # for the copy and goes on; sandboxes made from a filesystem snapshot
    # start its image's command, not its processes. A taken name raises
    # AlreadyExistsError, a bad one InvalidArgumentError.
    # @param kind [Symbol, nil] +:filesystem+ (the default) or +:full+
    # @return [SnapshotInfo]
    def snapshot(name, kind: nil) = SnapshotInfo.from_json(call(op: "snapshot", name: name, kind: kind&.to_s))

    # @api private: the copies of a fork (see {Sandbox#fork}), as handles.
    def fork_handles(count, names, detached)
      raise TypeError, "names is an Array of names, not one String" if names.is_a?(String)

      copies = call(op: "fork", count: count, names: Array(names).map(&:to_s), detached: detached ? true : false)
      copies.map { |r| Handle.new(Burrow.call(nil, { op: "bind", id: r["id"], name: r["name"], status: r["status"] })) }
    end

    # Stops it if it runs and removes it, with everything it wrote.
    # @return [nil]
    def destroy = call(op: "destroy") && nil

    # Log lines written so far.
    # @param tail [Integer, nil] only the last lines of each source
    # @param source [Symbol, nil] +:stdout+, +:stderr+, +:supervisor+ or +:guest+ (nil: all)
    # @return [Array<LogLine>]
    def logs(tail: nil, source: nil)
      call(op: "logs", tail: tail, source: source&.to_s).map { |l| LogLine.from_json(l) }
    end

    # Log lines as they are written, until the run current when the follow
    # begins ends (the core ends the stream after that run's last lines; at
    # once after the lines already written when none runs). Without a
    # block, an Enumerator.
    # @yieldparam line [LogLine]
    # @return [Enumerator, nil]
    def follow_logs(tail: nil, source: nil)
      return enum_for(:follow_logs, tail: tail, source: source) unless block_given?

      cursor = call(op: "follow_logs", tail: tail, source: source&.to_s)
      loop do
        line = Burrow.call(cursor, { op: "next" })
        break if line.nil?

        yield LogLine.from_json(line)
      end
      nil
    end

    # Changes the configuration (+sb.modify(cpus: 4, memory: 4096)+). Only
    # the keywords given change; +nil+ clears +cpus+, +memory+,
    # +idle_timeout+ and +max_duration+. +memory+ is MiB (+memory_mb+ is an
    # alias of it); durations are seconds or duration text. +idle_action+ is
    # +:stop+ or +:hibernate+ (nil leaves it as it is). The plan says where
    # each change lands (live, or at the next start).
    # @param env [Hash{String=>String}] entries to set
    # @param unset_env [Array<String>] entries to remove
    # @param labels [Hash{String=>String}] labels to set
    # @param unset_labels [Array<String>] labels to remove
    # @return [ModifyPlan]
    def modify(cpus: UNSET, memory: UNSET, idle_timeout: UNSET, idle_action: UNSET, max_duration: UNSET,
               env: nil, unset_env: nil, labels: nil, unset_labels: nil, memory_mb: UNSET, network: UNSET)
      unless memory_mb.equal?(UNSET)
        raise ArgumentError, "memory and memory_mb (its alias) given both" unless memory.equal?(UNSET)

        memory = memory_mb
      end
      op = { op: "modify", env_set: env, env_unset: unset_env, labels_set: labels, labels_unset: unset_labels }.compact
      { cpus: cpus, memory_mb: memory, idle_timeout: idle_timeout, max_duration: max_duration }.each do |k, v|
        op[k] = v unless v.equal?(UNSET)
      end
      op[:idle_action] = idle_action&.to_s unless idle_action.equal?(UNSET)
      op[:network] = Convert.network_json(network) unless network.equal?(UNSET)
      plan = ModifyPlan.from_json(Burrow.call(@native, op, compact: false))
      @status = plan.info.status
      plan
    end

    def inspect = "#<#{self.class.name} #{@name} #{@id}>"

    private

    def call(op, data = nil) = Burrow.call(@native, op, data)

    # A call answering a record, which becomes the status snapshot.
    def record(op)
      info = SandboxInfo.from_json(call(op))
      @status = info.status
      info
    end

    # A Sandbox of a run this call gave (it owns it if the run was
    # started by this process and is attached); its status is this
    # object's snapshot too.
    def live(native)
      sandbox = Sandbox.send(:owning, native)
      @status = sandbox.status
      sandbox
    end
  end

  # A metadata handle of one sandbox id: lifecycle calls, whatever the
  # status (it may be stopped). {#connect_or_start} gives a {Sandbox};
  # {#status} is the status it was made with (no call).
  class Handle < Target
    # Starts it (created, stopped or crashed): strict.
    # @return [Sandbox]
    def start = live(call(op: "start"))

    # The running sandbox ({InvalidStateError} if it is not running).
    # @return [Sandbox]
    def connect = live(call(op: "connect"))

    # Converges on the running sandbox: waits through a start, starts it
    # if it is stopped; one start however many callers.
    # @return [Sandbox]
    def connect_or_start = live(call(op: "connect_or_start"))

    # Stops then starts it (same id and configuration, next generation).
    # @return [Sandbox]
    def restart = live(call(op: "restart"))

    # Removes it (created, stopped or crashed only).
    # @return [nil]
    def remove = call(op: "remove") && nil

    # Forks the running sandbox (see {Sandbox#fork}).
    # @return [Array<Handle>] the copies' handles, in order
    def fork(count = nil, names: nil, detached: false) = fork_handles(count, names, detached)
  end

  # What {Sandbox.list} answers: a handle of each sandbox that matched,
  # each with the status it was listed with as its {Target#status}.
  # Enumerable over the handles.
  #
  # @!attribute [r] sandboxes
  #   @return [Array<Handle>]
  SandboxPage = Struct.new(:sandboxes, keyword_init: true) do
    include Enumerable

    # @yieldparam handle [Handle]
    def each(&block)
      return sandboxes.each unless block

      sandboxes.each(&block)
      self
    end

    # @return [Integer] how many sandboxes matched
    def size = sandboxes.size
  end

  # A running sandbox, bound to one id and run: commands, files, streams.
  #
  # == Ownership
  # An attached sandbox (the default) is owned by the process that started
  # its run: it stops (+exit_reason+ +:owner_exited+) when that process
  # exits, however it exits (SIGKILL too). In Ruby the {Sandbox} object
  # through which this process started the run owns it as well: when that
  # object is garbage collected, the run is stopped (if it is still the
  # current, attached run). Keep a reference while you use it, use the
  # block form, or create it with +detached: true+ (or call {#detach}).
  class Sandbox < Target
    # @return [Integer] the run this object is connected to now (a demand
    #   start or a restart moves it to the next one)
    def generation = JSON.parse(@native.describe)["generation"]

    # Copies the running sandbox into new sandboxes, each started:
    # +count+ copies (default 1, or one per name) named +names+ (default
    # +"<name>-fork-<n>"+). A vm sandbox is copied whole (memory, processes
    # and files; each copy has its own id, hostname, machine id and random
    # state) and stops only for the save; a container is copied by its
    # files (its processes are not copied: each copy runs its image's
    # command afresh). All or nothing: a taken name raises
    # AlreadyExistsError and no copy is left; a sandbox that is not
    # running, InvalidStateError.
    # @param count [Integer, nil]
    # @param names [Array<String>, nil]
    # @param detached [Boolean] the copies survive this process
    # @return [Array<Sandbox>] the copies, in order
    def fork(count = nil, names: nil, detached: false) = fork_handles(count, names, detached).map(&:connect)

    class << self
      # Creates and starts the sandbox +name+ (strict: a taken name is
      # {AlreadyExistsError}; +replace: true+ destroys the holder first).
      # With a block, yields it and destroys it after.
      #
      # @param options [Hash] +image+, +driver+, +runtime+, +cpus+, +memory+
      #   (MiB), +pids_limit+, +disk_mb+ (the writable layer's limit in MiB,
      #   32 to 16 TiB; past it the guest gets +ENOSPC+; held by the vm
      #   driver and by containers run as root), +best_effort_limits+ (run
      #   without a limit this host cannot enforce for this user, as a
      #   rootless container's disk, instead of {InvalidConfigError}),
      #   +default_limits+ (+false+: the limits left out stay unlimited
      #   instead of taking the backend's defaults), +seccomp_allow+
      #   (+["io_uring_setup"]+: syscalls, by x86-64 name, the seccomp filter
      #   allows beyond burrow's profile; a bad name raises
      #   {InvalidConfigError}; +burrow serve+ allows it, and
      #   +default_limits: false+, to its default tenant only), +env+,
      #   +workdir+, +labels+, +volumes+
      #   (+[{source:, target:, read_only:}]+), +network+ (+true+, +false+ or
      #   a {NetworkPolicy}), +ports+ (+["8080:80", "0.0.0.0:5353:53/udp"]+:
      #   published while it runs; a taken host port raises
      #   {PortUnavailableError} at start), +secrets+ (+[Burrow::Secret.new(
      #   name: "GITHUB_TOKEN", value: token, hosts: ["api.github.com"])]+,
      #   optionally with +headers: ["X-Api-Key"]+: values the guest never
      #   holds; see {Secret}), +idle_timeout+,
      #   +idle_action+ (+:stop+ or +:hibernate+), +max_duration+,
      #   +startup_timeout+ (seconds), +demand_start+, +detached+, +replace+
      # @yieldparam sandbox [Sandbox]
      # @return [Sandbox] (with a block: the block's value)
      def create(name, **options, &block)
        mode = options.delete(:replace) ? "replace" : "create"
        build(mode, name, options, &block)
      end

      # Converges: every caller, in any process, gets the one sandbox of
      # that name (created, or started if stopped, at most once). The
      # options apply only if this call creates it.
      # @return [Sandbox] (with a block: the block's value; destroys it after)
      def connect_or_create(name, **options, &block) = build("connect_or_create", name, options, &block)

      # Starts the stopped (or created, or crashed) sandbox now named
      # +name+, with its persisted configuration: later, resume where you
      # left off. Strict: a running sandbox is {InvalidStateError}, a name
      # held by none {NotFoundError}.
      # @return [Sandbox]
      def start(name) = owning(Burrow.call(nil, { op: "start", name: name }))

      # Persists the sandbox without starting it.
      # @return [Handle]
      def define(name, **options)
        Handle.new(Burrow.call(nil, { op: "build", mode: "define", name: name, **build_options(options) }))
      end

      # A handle of the sandbox now named +name+ ({NotFoundError} if none).
      # @return [Handle]
      def get(name) = Handle.new(Burrow.call(nil, { op: "get", name: name }))

      # A handle of exactly this id.
      # @return [Handle]
      def get_by_id(id) = Handle.new(Burrow.call(nil, { op: "get_by_id", id: id }))

      # The sandboxes that match, as a page of handles
      # (+Burrow::Sandbox.list.sandboxes+), each with the status it was
      # listed with as its {Target#status} (no call per handle; a call on
      # one checks its identity).
      # @param status [Symbol, Array<Symbol>, nil]
      # @param labels [Hash{String=>String}, nil] all of them must match
      # @return [SandboxPage]
      def list(status: nil, labels: nil)
        records = Burrow.call(nil, { op: "list", statuses: Array(status).map(&:to_s), labels: labels })
        handles = records.map do |r|
          Handle.new(Burrow.call(nil, { op: "bind", id: r["id"], name: r["name"], status: r["status"] }))
        end
        SandboxPage.new(sandboxes: handles)
      end

      # Removes the sandbox +name+ (created, stopped or crashed).
      # @return [nil]
      def remove(name) = Burrow.call(nil, { op: "remove", name: name }) && nil

      # What the backend can do beyond the lifecycle every backend has
      # (pause, live modify, metrics, ...).
      # @return [Capabilities]
      def capabilities = Capabilities.from_json(Burrow.call(nil, { op: "capabilities" }))

      # The stored snapshots, by name.
      # @return [Array<SnapshotInfo>]
      def snapshots = Burrow.call(nil, { op: "list_snapshots" }).map { |h| SnapshotInfo.from_json(h) }

      # One stored snapshot (NotFoundError if there is none).
      # @return [SnapshotInfo]
      def get_snapshot(name) = SnapshotInfo.from_json(Burrow.call(nil, { op: "get_snapshot", name: name }))

      # Removes a stored snapshot: SnapshotInUseError (its +sandboxes+
      # naming them) while sandboxes created from it exist. Its content goes
      # at the next image prune.
      # @return [nil]
      def remove_snapshot(name) = Burrow.call(nil, { op: "remove_snapshot", name: name }) && nil

      # Defines the warm pool +name+: +size+ sandboxes (0 to 64) of the
      # configuration the options make (those of {create}; +detached+ does
      # not apply: warm sandboxes belong to no process), and returns once
      # they run. A {create} or {connect_or_create} of that configuration
      # (but for its labels, env, idle timeout and action, max duration,
      # demand start and startup timeout) then claims one of them, running,
      # under its own name, labels and env; the pool refills in the
      # background; {define} never claims. A taken name is
      # {AlreadyExistsError}, a bad one {InvalidNameError}, a size over 64
      # {InvalidArgumentError}, labels, ports or secrets (each sandbox's
      # own) {InvalidConfigError}; a refused definition changes nothing.
      # @return [PoolInfo]
      def create_pool(name, size, **options)
        options = build_options(options.except(:detached))
        PoolInfo.from_json(Burrow.call(nil, { op: "create_pool", name: name, size: size, **options }))
      end

      # One warm pool, its sandboxes counted (NotFoundError if there is none).
      # @return [PoolInfo]
      def get_pool(name) = PoolInfo.from_json(Burrow.call(nil, { op: "get_pool", name: name }))

      # Every warm pool, by name (their warm sandboxes are never listed).
      # @return [Array<PoolInfo>]
      def list_pools = Burrow.call(nil, { op: "list_pools" }).map { |h| PoolInfo.from_json(h) }

      # Sets how many warm sandboxes the pool keeps (0 to 64) and returns
      # once it has started or removed sandboxes to match.
      # @return [PoolInfo]
      def scale_pool(name, size) = PoolInfo.from_json(Burrow.call(nil, { op: "scale_pool", name: name, size: size }))

      # Removes the pool and its warm sandboxes; sandboxes claimed from it
      # are ordinary sandboxes, and stay.
      # @return [nil]
      def remove_pool(name) = Burrow.call(nil, { op: "remove_pool", name: name }) && nil

      private

      def build(mode, name, options)
        op = { op: "build", mode: mode, name: name, **build_options(options) }
        sandbox = owning(Burrow.call(nil, op))
        return sandbox unless block_given?

        begin
          yield sandbox
        ensure
          sandbox.destroy
        end
      end

      def build_options(options)
        options = options.dup
        if options.key?(:memory)
          raise ArgumentError, "memory and memory_mb (its alias) given both" if options.key?(:memory_mb)

          options[:memory_mb] = options.delete(:memory)
        end
        options[:driver] = options[:driver]&.to_s
        options[:runtime] = options[:runtime]&.to_s
        options[:idle_action] = options[:idle_action]&.to_s
        options[:network] = Convert.network_json(options[:network]) if options.key?(:network)
        options[:secrets] = Convert.secrets_json(options[:secrets]) if options.key?(:secrets)
        options
      end

      # A Sandbox that owns its run if this process started it (attached)
      # and no other object of this process owns that run already.
      def owning(native)
        sandbox = new(native)
        sandbox.send(:claim)
        sandbox
      end
    end

    # Runs owned by a Sandbox of this process ("id:generation").
    OWNED_RUNS = {}
    OWNED_LOCK = Mutex.new
    private_constant :OWNED_RUNS, :OWNED_LOCK

    # Whether this object owns the run in this process: garbage collecting
    # it stops the run (see the class documentation). Never in a fork
    # child (the parent owns the run).
    def owner? = !@owner.nil? && @owner_pid == ::Process.pid

    # A handle of the same sandbox (it never stops the run when collected),
    # with this object's {#status}.
    # @return [Handle]
    def handle = Handle.new(call(op: "handle"), status: @status)

    # A round trip to the guest agent: a health check, not activity (it
    # does not keep an idle sandbox alive; {#touch} does).
    # @return [Ping] its +latency+ in seconds
    def ping = Ping.new(latency: call(op: "ping"))

    # Lets the sandbox outlive its owner from now on.
    # @return [SandboxInfo]
    def detach
      info = record(op: "detach")
      disown
      info
    end

    # Stops then starts it; this object follows it into the new run.
    # @return [SandboxInfo]
    def restart
      info = record(op: "restart")
      owned = owner?
      disown
      owned ? own : claim(info)
      info
    end

    # File operations (absolute guest paths).
    # @return [Fs]
    def fs = Fs.new(@native)

    # Runs +argv+ to its end and collects its output. A String runs through
    # +sh -c+. A non-zero exit is not an exception.
    # @param argv [Array<String>, String]
    # @param stdin [String, nil] bytes written to its stdin
    # @param env [Hash{String=>String}, nil]
    # @param cwd [String, nil]
    # @param timeout [Numeric, nil] seconds, then it is killed (+timed_out+)
    # @param output_limit [Integer, nil] keep at most this many bytes of
    #   each of stdout and stderr (the rest is read and dropped; the command
    #   runs to its end); +truncated?+ says whether any was dropped
    # @return [ExecResult]
    def exec(argv, stdin: nil, env: nil, cwd: nil, timeout: nil, output_limit: nil)
      r = call({ op: "exec", argv: Burrow.argv(argv), env: env, cwd: cwd, timeout: timeout,
                 output_limit: output_limit }, stdin)
      ExecResult.new(stdout: Base64.decode64(r["stdout"]), stderr: Base64.decode64(r["stderr"]),
                     exit_code: r["exit_code"], signal: r["signal"], timed_out: r["timed_out"],
                     truncated: r["truncated"] == true)
    end

    # Starts +argv+ with streamed output. With a block, yields each chunk
    # as +(stream, data)+ (+stream+ +:stdout+ or +:stderr+) and returns the
    # {ExitStatus} (leaving the block early kills the process); without
    # one, returns the {Process} (its stdin stays open unless +stdin+ is
    # given).
    # @return [Process, ExitStatus]
    def spawn(argv, stdin: nil, env: nil, cwd: nil, timeout: nil, &block)
      native = call({ op: "spawn", argv: Burrow.argv(argv), env: env, cwd: cwd, timeout: timeout,
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

    private

    # Owns the run if this process started it and it is attached.
    def claim(info = self.info)
      return if info.detached || !Burrow.started_here?(info.last_run&.supervisor_pid)

      own
    end

    # From now on, collecting this object stops the current run (unless
    # another object of this process owns it already).
    def own
      gen = generation
      key = "#{@id}:#{gen}"
      claimed = OWNED_LOCK.synchronize { OWNED_RUNS.key?(key) ? false : (OWNED_RUNS[key] = true) }
      return unless claimed

      @owner = [key, gen]
      @owner_pid = ::Process.pid
      Burrow.watch_exit
      ObjectSpace.define_finalizer(self, Sandbox.releaser(@native, @owner, ::Process.pid))
    end

    def disown
      return unless @owner

      OWNED_RUNS.delete(@owner[0])
      @owner[1] = nil
      @owner = nil
      ObjectSpace.undefine_finalizer(self)
    end

    # The finalizer: it must not refer to the Sandbox, and must not block
    # (the release runs as a task of the core). Not in a fork child (the
    # parent owns the run), not at exit (the supervisor sees the exit).
    def self.releaser(native, owner, pid)
      lambda do |_id|
        key, gen = owner
        next if gen.nil? || ::Process.pid != pid

        OWNED_RUNS.delete(key) # one Hash operation: no lock in a finalizer
        next if Burrow.exiting?

        Native.spawn_call(native, JSON.generate({ op: "release", generation: gen }))
      end
    end
  end

  # A command started by {Sandbox#spawn}: enumerate its output, write its
  # stdin, signal it.
  class Process
    include Enumerable

    # @return [ExitStatus, nil] once it has ended (and its output was read)
    attr_reader :exit_status

    # @api private
    def initialize(native)
      @native = native
      @exit_status = nil
    end

    # Yields +(stream, data)+ for each chunk of output until the exit.
    # @yieldparam stream [Symbol] +:stdout+ or +:stderr+
    # @yieldparam data [String] binary
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
      self
    end

    # Writes bytes to its stdin.
    def write(data) = Burrow.call(@native, { op: "write" }, data) && nil
    alias << write

    # Closes its stdin (end of input).
    def close_stdin = Burrow.call(@native, { op: "close_stdin" }) && nil

    # Sends a signal (a number, or a name such as +:TERM+).
    def signal(sig)
      sig = Signal.list.fetch(sig.to_s.delete_prefix("SIG")) unless sig.is_a?(Integer)
      Burrow.call(@native, { op: "signal", signal: sig }) && nil
    end

    # Sends SIGKILL.
    # @return [nil]
    def kill = signal(9)

    # Waits for the exit, collecting its output.
    # @return [ExecResult]
    def wait
      out = +"".b
      err = +"".b
      each { |stream, data| (stream == :stdout ? out : err) << data }
      s = @exit_status
      ExecResult.new(stdout: out, stderr: err, exit_code: s&.exit_code, signal: s&.signal, timed_out: s&.timed_out,
                     truncated: false)
    end
  end
end
