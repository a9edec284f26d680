# frozen_string_literal: true

module Burrow
  # Conversions of the core's JSON records (milliseconds, status names)
  # into Ruby values (seconds as Float, Symbols, Time).
  module Convert
    module_function

    # @return [Time, nil]
    def time(ms) = ms && Time.at(Rational(ms, 1000))

    # @return [Float, nil] seconds
    def seconds(ms) = ms && ms / 1000.0

    # @return [Symbol, nil]
    def sym(name) = name&.to_sym

    # @return [Boolean, NetworkPolicy] a configuration's network
    def network(value)
      return value == true || value == "all" unless value.is_a?(Hash)

      NetworkPolicy.new(allow: value["allow"] || [], deny: value["deny"] || [])
    end

    # The core's JSON of a +secrets:+ argument (an Array of {Secret}).
    # @api private
    def secrets_json(value)
      raise TypeError, "secrets is an Array of Burrow::Secret, not #{value.class}" unless value.is_a?(Array)

      value.map do |s|
        raise TypeError, "a secret is a Burrow::Secret, not #{s.class}" unless s.is_a?(Secret)

        s.to_json_value
      end
    end

    # The core's JSON of a +network:+ argument.
    # @api private
    def network_json(value)
      case value
      when true, false, "all", "none" then value
      when :all, :none then value.to_s
      when NetworkPolicy then value.to_json_value
      when Hash
        extra = value.keys.map(&:to_sym) - %i[allow deny]
        raise ArgumentError, "a network policy has allow and deny only, not #{extra.inspect}" unless extra.empty?

        NetworkPolicy.new(allow: value[:allow] || value["allow"], deny: value[:deny] || value["deny"]).to_json_value
      else
        raise TypeError, "network is true/false, :all/:none or a NetworkPolicy, not #{value.class}"
      end
    end
  end

  # The configuration of a sandbox (as stored; durations in seconds).
  #
  # @!attribute [r] image
  #   @return [String]
  # @!attribute [r] driver
  #   @return [Symbol, nil] +:container+ or +:vm+ (nil: the backend's default)
  # @!attribute [r] runtime
  #   @return [Symbol] the OCI runtime (+:runc+, +:crun+, +:runsc+)
  # @!attribute [r] cpus
  #   @return [Float, nil] CPU limit (nil: none)
  # @!attribute [r] memory
  #   @return [Integer, nil] memory limit in MiB (nil: none)
  # @!attribute [r] disk_mb
  #   @return [Integer, nil] disk limit of the writable layer in MiB (nil: none)
  # @!attribute [r] default_limits
  #   @return [Boolean] whether the limits left out took the backend's
  #     defaults (+true+ unless created with +default_limits: false+)
  # @!attribute [r] seccomp_allow
  #   @return [Array<String>] syscalls the seccomp filter allows beyond
  #     burrow's profile
  # @!attribute [r] idle_timeout
  #   @return [Float, nil] seconds without calls before an idle stop
  # @!attribute [r] idle_action
  #   @return [Symbol] what idle reclaim does: +:stop+ (the default) or
  #     +:hibernate+ (the vm driver saves the whole guest and the next start
  #     resumes it; where it cannot, the sandbox is stopped)
  # @!attribute [r] max_duration
  #   @return [Float, nil] the longest a run may last, in seconds
  # @!attribute [r] startup_timeout
  #   @return [Float] seconds a start may take
  # A sandbox's network policy: what +allow+ rules match and no +deny+
  # rule does (+NetworkPolicy.new(allow: ["pypi.org"], deny: ["tcp:*:25"])+;
  # a plain +{allow: [...], deny: [...]}+ Hash does as well). A rule is
  # +[tcp:|udp:]HOST[:PORTS]+; a bad one raises {InvalidConfigError}.
  NetworkPolicy = Struct.new(:allow, :deny, keyword_init: true) do
    # @api private
    def to_json_value = { allow: Array(allow), deny: Array(deny) }
  end

  # A secret the sandbox never holds
  # (+Burrow::Secret.new(name: "GITHUB_TOKEN", value: token, hosts: ["api.github.com"])+):
  # the guest's variable +name+ holds a placeholder, which the sandbox's
  # network stack replaces with +value+ in the values of the request
  # headers +headers+ names (absent or empty: +Authorization+ and
  # +Proxy-Authorization+; +headers: ["X-Api-Key"]+) of HTTP requests
  # (HTTPS included) to +hosts+ only (+"api.github.com"+, +"*.example.com"+,
  # an IPv4 address); a placeholder in the request line or another header,
  # or sent anywhere else, closes the connection. The sandbox needs a
  # network. The value is never read back, nor shown by +inspect+; a bad
  # name, host, header (at most 16, each once, never one that routes or
  # frames a request: +Host+, +Content-Length+, ...) or value raises
  # {InvalidConfigError}. See docs/networking.md.
  Secret = Struct.new(:name, :value, :hosts, :headers, keyword_init: true) do
    # @api private
    def to_json_value
      raise TypeError, "a secret's hosts are an Array of Strings" unless hosts.is_a?(Array)
      raise TypeError, "a secret's headers are an Array of Strings" unless headers.nil? || headers.is_a?(Array)

      { name: name, value: value, hosts: hosts, headers: headers || [] }
    end

    def inspect = "#<struct Burrow::Secret name=#{name.inspect}, hosts=#{hosts.inspect}, headers=#{headers.inspect}>"
    alias_method :to_s, :inspect
  end

  # A secret as a configuration reads it back: its name, hosts, the
  # headers it names (empty: the default two) and the placeholder the
  # guest's variable holds (never the value).
  SecretRecord = Struct.new(:name, :hosts, :headers, :placeholder, keyword_init: true)

  # @!attribute [r] network
  #   @return [Boolean, NetworkPolicy] +false+, +true+ (anything public) or the policy
  # @!attribute [r] secrets
  #   @return [Array<SecretRecord>] each secret's name, hosts, headers and placeholder
  # @!attribute [r] ports
  #   @return [Array<String>] published ports, canonical (+"127.0.0.1:8080:80"+)
  SandboxConfig = Struct.new(:image, :driver, :runtime, :cpus, :memory, :pids_limit, :disk_mb, :default_limits,
                             :seccomp_allow, :env, :workdir, :labels, :mounts, :network, :ports, :secrets,
                             :idle_timeout, :idle_action, :max_duration, :startup_timeout, :demand_start,
                             keyword_init: true) do
    # @api private
    def self.from_json(h)
      new(image: h["image"], driver: Convert.sym(h["driver"]), runtime: Convert.sym(h["runtime"]),
          cpus: h["cpus"], memory: h["memory_mb"], pids_limit: h["pids_limit"], disk_mb: h["disk_mb"],
          default_limits: h.fetch("default_limits", true), seccomp_allow: h["seccomp_allow"] || [],
          env: h["env"] || {},
          workdir: h["workdir"], labels: h["labels"] || {}, mounts: h["mounts"] || [],
          network: Convert.network(h["network"]), ports: h["ports"] || [],
          secrets: (h["secrets"] || []).map do |s|
            SecretRecord.new(name: s["name"], hosts: s["hosts"], headers: s["headers"] || [],
                             placeholder: s["placeholder"])
          end,
          idle_timeout: Convert.seconds(h["idle_timeout"]), idle_action: Convert.sym(h["idle_action"] || "stop"),
          max_duration: Convert.seconds(h["max_duration"]), startup_timeout: Convert.seconds(h["startup_timeout"]),
          demand_start: h["demand_start"])
    end
  end

  # One run (start to stop) of a sandbox.
  #
  # @!attribute [r] exit_reason
  #   @return [Symbol, nil] +:completed+, +:stopped+, +:killed+,
  #     +:idle_timeout+, +:max_duration+, +:crashed+, +:drain+,
  #     +:owner_exited+, +:start_failed+ or +:hibernated+ (reclaimed after
  #     being idle, its whole guest saved: the next start resumes it) (nil
  #     while it runs)
  # @!attribute [r] timings
  #   @return [Hash, nil] the start's phases in milliseconds
  RunInfo = Struct.new(:generation, :supervisor_pid, :started_at, :running_at, :ended_at, :exit_reason, :detail,
                       :timings, keyword_init: true) do
    # @api private
    def self.from_json(h)
      h && new(generation: h["generation"], supervisor_pid: h["supervisor_pid"],
               started_at: Convert.time(h["started_at_ms"]), running_at: Convert.time(h["running_at_ms"]),
               ended_at: Convert.time(h["ended_at_ms"]), exit_reason: Convert.sym(h["exit_reason"]),
               detail: h["detail"], timings: h["timings"])
    end
  end

  # The record of a sandbox, as read at one moment.
  #
  # @!attribute [r] status
  #   @return [Symbol] +:created+, +:starting+, +:running+, +:draining+,
  #     +:paused+, +:stopped+ or +:crashed+
  # @!attribute [r] generation
  #   @return [Integer] how many runs it has started
  # @!attribute [r] last_run
  #   @return [RunInfo, nil]
  SandboxInfo = Struct.new(:id, :name, :status, :config, :generation, :detached, :created_at, :updated_at,
                           :last_run, keyword_init: true) do
    # @api private
    def self.from_json(h)
      new(id: h["id"], name: h["name"], status: Convert.sym(h["status"]),
          config: SandboxConfig.from_json(h["config"]), generation: h["generation"], detached: h["detached"],
          created_at: Convert.time(h["created_at_ms"]), updated_at: Convert.time(h["updated_at_ms"]),
          last_run: RunInfo.from_json(h["last_run"]))
    end
  end

  # What Target#modify did: each change with where it applies
  # (+:live+, +:future_execs+, +:next_start+ or +:immediately+), and the record after it.
  ModifyPlan = Struct.new(:changes, :info, keyword_init: true) do
    # @api private
    def self.from_json(h)
      new(changes: h["changes"].map { |c| ModifyChange.new(field: c["field"].to_sym, applies: c["applies"].to_sym) },
          info: SandboxInfo.from_json(h["info"]))
    end
  end

  # One change of a ModifyPlan.
  ModifyChange = Struct.new(:field, :applies, keyword_init: true)

  # What Sandbox#ping measured: a round trip to the guest agent.
  #
  # @!attribute [r] latency
  #   @return [Float] seconds
  Ping = Struct.new(:latency, keyword_init: true)

  # Resource usage of a running sandbox (nil where the driver cannot tell).
  #
  # @!attribute [r] disk_bytes
  #   @return [Integer, nil] bytes the writable layer takes on the host's disk
  # @!attribute [r] disk_limit_bytes
  #   @return [Integer, nil] the writable layer's limit in bytes
  Metrics = Struct.new(:cpu_usage_ns, :memory_bytes, :memory_limit_bytes, :io_read_bytes, :io_write_bytes, :pids,
                       :disk_bytes, :disk_limit_bytes, keyword_init: true) do
    # @api private
    def self.from_json(h) = new(**h.transform_keys(&:to_sym).slice(*members))
  end

  # What the backend can do beyond the lifecycle every backend has
  # (Sandbox.capabilities); an operation it lacks raises UnsupportedError.
  # The local backend of an unprivileged user without a delegated cgroup
  # lacks +pause+.
  Capabilities = Struct.new(:pause, :modify_live, :metrics, :logs, :idle_reclaim, :attached, :persistent_layer,
                            :network_policy, :published_ports, :secrets, :snapshots, :full_snapshots, :fork, :pools,
                            keyword_init: true) do
    # @api private
    def self.from_json(h) = new(network_policy: false, published_ports: false, secrets: false, snapshots: false,
                                full_snapshots: false, fork: false, pools: false,
                                **h.transform_keys(&:to_sym).slice(*members))
  end

  # A stored snapshot (Sandbox#snapshot). Create sandboxes from it with
  # +image: info.image+ (+"snapshot:NAME"+).
  # @!attribute [r] kind
  #   @return [Symbol] +:filesystem+ (its files) or +:full+ (a running vm whole)
  # @!attribute [r] size
  #   @return [Integer] bytes it adds to the store (the base image's layers are shared)
  # @!attribute [r] created_at
  #   @return [Time]
  SnapshotInfo = Struct.new(:name, :kind, :image, :digest, :size, :source_id, :source_name, :base_image, :driver,
                            :created_at, keyword_init: true) do
    # @api private
    def self.from_json(h)
      new(name: h["name"], kind: h["kind"].to_sym, image: h["image"], digest: h["digest"], size: h["size"],
          source_id: h["source_id"], source_name: h["source_name"], base_image: h["base_image"],
          driver: h["driver"].to_sym, created_at: Time.at(h["created_at_ms"] / 1000r))
    end
  end

  # A warm pool as it stands (Sandbox.create_pool): sandboxes of one
  # configuration kept started and unclaimed. A create of that
  # configuration (but for its labels, environment, timeouts, idle action
  # and demand start) claims one of them instead of starting; a define
  # never does.
  # @!attribute [r] config
  #   @return [SandboxConfig] what its sandboxes run
  # @!attribute [r] warm
  #   @return [Integer] warm sandboxes running and unclaimed now
  # @!attribute [r] starting
  #   @return [Integer] warm sandboxes still starting
  # @!attribute [r] claims
  #   @return [Integer] creates that claimed one of its sandboxes
  # @!attribute [r] misses
  #   @return [Integer] creates of its configuration that found none warm and started cold
  # @!attribute [r] last_refill
  #   @return [Float, nil] seconds its last refill took to start its sandboxes (nil before the first)
  # @!attribute [r] created_at
  #   @return [Time]
  PoolInfo = Struct.new(:name, :config, :size, :warm, :starting, :claims, :misses, :last_refill, :created_at,
                        keyword_init: true) do
    # @api private
    def self.from_json(h)
      new(name: h["name"], config: SandboxConfig.from_json(h["config"]), size: h["size"], warm: h["warm"],
          starting: h["starting"], claims: h["claims"], misses: h["misses"],
          last_refill: Convert.seconds(h["last_refill_ms"]), created_at: Convert.time(h["created_at_ms"]))
    end
  end

  # An entry of Fs#list.
  # @!attribute [r] kind
  #   @return [Symbol] +:file+, +:dir+, +:symlink+ or +:other+
  DirEntry = Struct.new(:name, :kind, :size, keyword_init: true) do
    # @api private
    def self.from_json(h) = new(name: h["name"], kind: h["kind"].to_sym, size: h["size"])
  end

  # What Fs#stat tells of a path.
  FileStat = Struct.new(:kind, :size, :mode, :uid, :gid, :mtime, :link_target, keyword_init: true) do
    # @api private
    def self.from_json(h)
      new(kind: h["kind"].to_sym, size: h["size"], mode: h["mode"], uid: h["uid"], gid: h["gid"],
          mtime: Time.at(h["mtime"]), link_target: h["link_target"])
    end
  end

  # A line of a sandbox's log.
  # @!attribute [r] source
  #   @return [Symbol] +:supervisor+ or +:guest+
  # A log line: +source+ (+:stdout+, +:stderr+, +:guest+, +:supervisor+),
  # +text+, and +time_ms+ (when it was written, milliseconds since the Unix
  # epoch; nil for the guest's log).
  LogLine = Struct.new(:source, :text, :time_ms, keyword_init: true) do
    # @api private
    def self.from_json(h) = new(source: h["source"].to_sym, text: h["text"], time_ms: h["time_ms"])
  end

  # How a command ended, with its output (binary Strings).
  ExecResult = Struct.new(:stdout, :stderr, :exit_code, :signal, :timed_out, :truncated, keyword_init: true) do
    # Exit code 0 and not timed out.
    def success? = exit_code == 0 && !timed_out # rubocop:disable Style/NumericPredicate (nil when signalled)

    # Output went past the +output_limit+ given: +stdout+ or +stderr+ holds
    # only its first bytes.
    def truncated? = truncated == true
  end

  # How a spawned command ended.
  ExitStatus = Struct.new(:exit_code, :signal, :timed_out, keyword_init: true) do
    def success? = exit_code == 0 && !timed_out # rubocop:disable Style/NumericPredicate
  end
end
