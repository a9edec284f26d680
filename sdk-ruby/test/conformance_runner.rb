# frozen_string_literal: true

# Interpreter of the language-neutral lifecycle cases
# (tests/conformance/cases.json) on top of the installed gem: the Ruby twin
# of sdk-python/tests/conformance_runner.py, sdk-node's and sdk-go's
# runners. The step vocabulary is documented in tests/conformance/README.md
# (and kept, with the document's structural check, in conformance_cases.rb).
#
# A race with "processes": true runs each caller in its own Ruby process
# (race_caller.rb, spawned), all released together by a barrier on their
# stdin; the other races run their callers as threads of this process (the
# calls release the GVL, so they really run at once).

require "json"
require "set"
require "time"
require "timeout"
require "rbconfig"
require "burrow"
require_relative "conformance_cases"

module Conformance
  # The Ruby class name of every core code (sdk-ruby/API.md, "Errors"),
  # kept here independently of the gem's own table so that the check can
  # fail.
  CODE_CLASSES = {
    "sandbox_replaced" => "Burrow::SandboxReplacedError",
    "already_exists" => "Burrow::AlreadyExistsError",
    "not_found" => "Burrow::NotFoundError",
    "invalid_state" => "Burrow::InvalidStateError",
    "invalid_name" => "Burrow::InvalidNameError",
    "invalid_config" => "Burrow::InvalidConfigError",
    "invalid_image" => "Burrow::InvalidImageError",
    "invalid_argument" => "Burrow::InvalidArgumentError",
    "starting" => "Burrow::StartingError",
    "start_failed" => "Burrow::StartFailedError",
    "timeout" => "Burrow::TimeoutError",
    "runtime_unavailable" => "Burrow::RuntimeUnavailableError",
    "guest" => "Burrow::GuestError",
    "protocol" => "Burrow::ProtocolError",
    "store" => "Burrow::StoreError",
    "io" => "Burrow::IOError",
    "unauthorized" => "Burrow::UnauthorizedError",
    "unsupported" => "Burrow::UnsupportedError",
    "port_unavailable" => "Burrow::PortUnavailableError",
    "snapshot_in_use" => "Burrow::SnapshotInUseError",
    "forbidden" => "Burrow::ForbiddenError",
    "quota_exceeded" => "Burrow::QuotaExceededError",
    "rate_limited" => "Burrow::RateLimitedError"
  }.freeze

  # How long a follow_logs step waits for its stream to end (seconds,
  # scaled) unless the step says.
  FOLLOW_TIMEOUT = 60.0
  VALUE_OPERATORS = %w[var str_repeat].freeze
  MATCH_OPERATORS = %w[ne one_of present].freeze
  OPERATOR_MODIFIERS = %w[add times].freeze

  # A field that is not there (unlike nil, a value).
  MISSING = Object.new.tap { |o| o.define_singleton_method(:inspect) { "<absent>" } }.freeze

  # A step's outcome did not meet its expectation.
  class Failure < StandardError; end

  # A step's result and what kind of thing it is.
  Result = Struct.new(:kind, :obj)
  # A step's result or error (exactly one is set).
  Outcome = Struct.new(:result, :error)

  module_function

  # -- values and matching ----------------------------------------------------

  def operator?(obj)
    return false unless obj.is_a?(Hash) && !obj.empty?

    main = obj.keys.select { |k| VALUE_OPERATORS.include?(k) || MATCH_OPERATORS.include?(k) }
    main.size == 1 && obj.keys.all? { |k| (VALUE_OPERATORS + MATCH_OPERATORS + OPERATOR_MODIFIERS).include?(k) }
  end

  # The language-neutral form of an SDK value: Symbols and bytes as text,
  # times as ISO text, string keys.
  def norm(v)
    case v
    when MISSING, nil, true, false, Numeric then v
    when Symbol then v.to_s
    when String then v.dup.force_encoding(Encoding::UTF_8)
    when Time then v.utc.iso8601(3)
    when Array then v.map { |x| norm(x) }
    when Hash then v.to_h { |k, x| [k.to_s, norm(x)] }
    when Struct then norm(v.to_h)
    else v
    end
  end

  def equal?(expected, actual)
    return false if actual.equal?(MISSING)
    return expected == actual if [true, false].include?(expected) || [true, false].include?(actual)
    return (expected - actual).abs < 1e-9 if expected.is_a?(Numeric) && actual.is_a?(Numeric)

    norm(expected) == norm(actual)
  end

  def show(v) = v.equal?(MISSING) ? "<absent>" : JSON.generate(norm(v))

  # A configuration in the cases' vocabulary (snake_case, seconds).
  def neutral_config(c)
    { "image" => c.image, "driver" => c.driver&.to_s, "runtime" => c.runtime&.to_s, "cpus" => c.cpus,
      "memory_mb" => c.memory, "pids_limit" => c.pids_limit, "disk_mb" => c.disk_mb,
      "default_limits" => c.default_limits, "seccomp_allow" => c.seccomp_allow, "env" => c.env, "workdir" => c.workdir,
      "labels" => c.labels, "network" => neutral_network(c.network), "ports" => c.ports,
      "secrets" => c.secrets.map do |s|
        { "name" => s.name, "hosts" => s.hosts, "headers" => s.headers, "placeholder" => s.placeholder }
      end,
      "idle_timeout" => c.idle_timeout,
      "idle_action" => c.idle_action&.to_s, "max_duration" => c.max_duration, "demand_start" => c.demand_start,
      "startup_timeout" => c.startup_timeout }
  end

  # A configuration's network as the core's JSON has it (a policy's empty
  # lists left out).
  def neutral_network(n)
    return n unless n.is_a?(Burrow::NetworkPolicy)

    { "allow" => n.allow, "deny" => n.deny }.reject { |_, v| v.nil? || v.empty? }
  end

  # A policy given as JSON becomes the package's NetworkPolicy: the typed
  # API is what the case exercises.
  def typed_network(v)
    return v unless v.is_a?(Hash)

    Burrow::NetworkPolicy.new(allow: v["allow"], deny: v["deny"])
  end

  def info_field(info, key)
    case key
    when "id", "name", "generation", "detached" then info.public_send(key)
    when "status" then info.status.to_s
    when "config" then neutral_config(info.config)
    when "exit_reason" then info.last_run&.exit_reason&.to_s
    when "detail" then info.last_run&.detail
    else MISSING
    end
  end

  def code_of(e) = e.is_a?(Burrow::Error) ? e.code : nil

  def describe(e) = "#{e.class}(code=#{code_of(e).inspect}): #{e.message}"

  # Whether +e+ is raised as the class of its code (and is a Burrow::Error).
  def class_ok?(e)
    code = code_of(e)
    cls = code && Burrow::ERROR_CLASSES[code]
    !cls.nil? && e.is_a?(Burrow::Error) && e.instance_of?(cls) && e.class.name == CODE_CLASSES[code]
  end

  def error_field(e, key)
    return MISSING unless e.is_a?(Burrow::Error)

    case key
    when "code" then e.code
    when "sandbox_id" then e.sandbox_id
    when "name" then e.name
    when "status" then e.status&.to_s
    when "guest_code" then e.guest&.fetch("code", nil)
    else MISSING
    end
  end

  def monotonic = Process.clock_gettime(Process::CLOCK_MONOTONIC)

  # Runs cases against the burrow home the process is configured for.
  class Runner
    attr_reader :values, :objects

    # @param home [String, nil] the burrow home of the case (handed to the
    #   race callers; nil: a server, through $BURROW_URL)
    def initialize(image:, home:, time_scale: nil, cleanup: true)
      @image = image
      @home = home
      @scale = (time_scale || ENV.fetch("BURROW_CONFORMANCE_TIME_SCALE", "1")).to_f
      @cleanup = cleanup
      @values = {}
      @objects = {}
      @jobs = {}
      @trace = []
    end

    def run_case(c)
      limit = (c["timeout"] || 180) * @scale
      begin
        Timeout.timeout(limit, Failure, "case #{c['id']} did not finish within #{limit} s\n#{trace_text}") do
          run_steps(c)
        end
      ensure
        clean_up
      end
    end

    def run_steps(c)
      c["steps"].each_with_index do |step, i|
        where = "#{c['id']} step #{i + 1} (#{step['op']})"
        @trace << "#{where}: #{JSON.generate(step)}"
        begin
          run_step(step, where)
        rescue Failure => e
          raise Failure, "#{e.message}\n--- steps so far ---\n#{trace_text}"
        end
      end
    end

    def trace_text = @trace.last(40).join("\n")

    def clean_up
      @jobs.each_value { |t| t.join(60) }
      @jobs.clear
      return unless @cleanup

      remove_pools
      Burrow::Sandbox.list.sandboxes.each do |handle|
        handle.destroy
      rescue Burrow::Error
        nil # cleanup only
      end
    rescue Burrow::Error
      nil
    end

    # The pools first (their warm sandboxes are never listed), where the
    # backend has them.
    def remove_pools
      Burrow::Sandbox.list_pools.each do |pool|
        Burrow::Sandbox.remove_pool(pool.name)
      rescue Burrow::Error
        nil # cleanup only
      end
    rescue Burrow::Error
      nil # unsupported: no pools
    end

    # -- steps ----------------------------------------------------------------

    def run_step(step, where)
      op = step["op"]
      if step.key?("background")
        job = step["background"]
        raise Failure, "#{where}: job #{job} already running" if @jobs.key?(job)

        @jobs[job] = Thread.new { invoke(step) }
        return
      end
      return sleep(step["seconds"].to_f) if op == "sleep"
      return repeat(step, where) if op == "repeat"
      return race(step, where) if op == "race"

      if op == "await"
        thread = @jobs.delete(step["job"]) or raise Failure, "#{where}: no background job #{step['job']}"
        return conclude(step, thread.value, where)
      end
      deadline = step.key?("within") ? Conformance.monotonic + (step["within"].to_f * @scale) : nil
      loop do
        outcome = invoke(step)
        begin
          conclude(step, outcome, where)
          return
        rescue Failure
          raise if deadline.nil? || Conformance.monotonic >= deadline
        end
        sleep 0.2
      end
    end

    def repeat(step, where)
      finish = Conformance.monotonic + step["seconds"].to_f
      interval = (step["interval"] || 0.5).to_f
      n = 1
      while Conformance.monotonic < finish
        run_step(step["do"], "#{where} run #{n}")
        n += 1
        sleep interval
      end
    end

    # Checks the outcome against the step's expectation, then binds and saves.
    def conclude(step, outcome, where)
      tolerate = step["tolerate"] || []
      if outcome.error && tolerate.include?(Conformance.code_of(outcome.error))
        check_error_class(outcome.error, where)
        return
      end
      check(step["expect"] || {}, outcome, where)
      return if outcome.error

      @objects[step["as"]] = outcome.result.obj if step.key?("as")
      (step["save"] || {}).each do |name, field|
        v = field(outcome.result, field, {})
        raise Failure, "#{where}: cannot save #{name}: no field #{field}" if v.equal?(MISSING)

        @values[name] = v
      end
    end

    def check(expect, outcome, where)
      if expect.key?("error")
        want = expect["error"]
        unless outcome.error
          raise Failure, "#{where}: expected error #{want}, but the step succeeded (#{summary(outcome.result)})"
        end
        if Conformance.code_of(outcome.error) != want
          raise Failure, "#{where}: expected error #{want}, got #{Conformance.describe(outcome.error)}"
        end

        check_error_class(outcome.error, where)
        expect.each do |key, expected|
          match(expected, Conformance.norm(Conformance.error_field(outcome.error, key)), "#{where}: error field #{key}") unless key == "error"
        end
        return
      end
      raise Failure, "#{where}: unexpected error #{Conformance.describe(outcome.error)}" if outcome.error

      cache = {}
      expect.each { |key, expected| match(expected, field(outcome.result, key, cache), "#{where}: field #{key}") }
    end

    def check_error_class(e, where)
      code = Conformance.code_of(e)
      raise Failure, "#{where}: error with unknown code: #{Conformance.describe(e)}" unless CODE_CLASSES.key?(code)
      return if Conformance.class_ok?(e)

      raise Failure, "#{where}: code #{code} must be raised as #{CODE_CLASSES[code]}, got #{Conformance.describe(e)}"
    end

    # Resolves value forms ({"var"}, {"str_repeat"}) recursively.
    def value(spec)
      if Conformance.operator?(spec) && spec.key?("var")
        raise Failure, "no saved value #{spec['var']}" unless @values.key?(spec["var"])

        v = @values[spec["var"]]
        return spec.key?("add") ? v + spec["add"] : v
      end
      return spec["str_repeat"].to_s * spec["times"].to_i if Conformance.operator?(spec) && spec.key?("str_repeat")
      return spec.map { |x| value(x) } if spec.is_a?(Array)
      return spec.transform_values { |x| value(x) } if spec.is_a?(Hash)

      spec
    end

    def match(expected, actual, what)
      fail_with = ->(reason) { raise Failure, "#{what}: #{reason}; actual #{Conformance.show(actual)}" }
      if Conformance.operator?(expected) && expected.keys.any? { |k| MATCH_OPERATORS.include?(k) }
        if expected.key?("ne")
          other = value(expected["ne"])
          fail_with.("expected anything but #{JSON.generate(other)}") if actual.equal?(MISSING) || Conformance.equal?(other, actual)
        elsif expected.key?("one_of")
          options = expected["one_of"].map { |x| value(x) }
          fail_with.("expected one of #{JSON.generate(options)}") unless options.any? { |o| Conformance.equal?(o, actual) }
        else
          present = !actual.equal?(MISSING) && !actual.nil?
          fail_with.(expected["present"] ? "expected a value" : "expected no value") if present != expected["present"]
        end
        return
      end
      if Conformance.operator?(expected)
        want = value(expected)
        fail_with.("expected #{JSON.generate(want)}") unless Conformance.equal?(want, actual)
        return
      end
      if expected.nil?
        fail_with.("expected null or absent") unless actual.nil? || actual.equal?(MISSING)
        return
      end
      if expected.is_a?(Hash)
        fail_with.("expected an object with #{expected.keys}") unless actual.is_a?(Hash)
        expected.each { |k, v| match(v, actual.key?(k) ? actual[k] : MISSING, "#{what}.#{k}") }
        return
      end
      if expected.is_a?(Array)
        fail_with.("expected #{JSON.generate(expected)}") unless actual.is_a?(Array) && actual.size == expected.size
        expected.each_with_index { |e, i| match(e, actual[i], "#{what}[#{i}]") }
        return
      end
      fail_with.("expected #{JSON.generate(expected)}") unless Conformance.equal?(expected, actual)
    end

    # -- fields ---------------------------------------------------------------

    def field(result, path, cache)
      head, *rest = path.split(".")
      v = Conformance.norm(top_field(result, head, cache))
      rest.each do |part|
        return MISSING unless v.is_a?(Hash)

        v = v.key?(part) ? v[part] : MISSING
      end
      v
    end

    def info_of(obj, cache) = (cache[obj.object_id] ||= obj.info)

    def top_field(result, key, cache)
      obj = result.obj
      case result.kind
      when :sandbox
        return obj.public_send(key) if %w[id name generation].include?(key)

        Conformance.info_field(info_of(obj, cache), key)
      when :handle
        return obj.public_send(key) if %w[id name].include?(key)

        Conformance.info_field(info_of(obj, cache), key)
      when :info then Conformance.info_field(obj, key)
      when :plan then key == "changes" ? obj.changes : Conformance.info_field(obj.info, key)
      when :exec
        case key
        when "stdout", "stderr", "exit_code", "signal", "timed_out", "truncated" then obj.public_send(key)
        when "ok" then obj.exit_code == 0 && !obj.timed_out # rubocop:disable Style/NumericPredicate (nil when signalled)
        else MISSING
        end
      when :value then key == "value" ? obj : MISSING
      when :list
        case key
        when "count" then obj.size
        when "names" then obj.map(&:name).sort
        else MISSING
        end
      else MISSING
      end
    end

    def summary(r)
      return "no result" unless r
      return "#{r.kind} #{r.obj.id}" if %i[sandbox handle].include?(r.kind)
      return "exit #{r.obj.exit_code}, stdout #{r.obj.stdout.inspect}" if r.kind == :exec

      "#{r.kind} #{JSON.generate(Conformance.norm(r.obj))}"[0, 300]
    end

    # -- operations -----------------------------------------------------------

    def invoke(step)
      Outcome.new(dispatch(step), nil)
    rescue Failure
      raise
    rescue StandardError => e
      Outcome.new(nil, e)
    end

    def build_options(step)
      o = { "image" => @image }.merge(value(step["options"] || {}))
      o.to_h do |k, v|
        case k
        when "memory_mb" then [:memory, v]
        when "network" then [:network, Conformance.typed_network(v)]
        when "secrets"
          [:secrets, v.map do |s|
            Burrow::Secret.new(name: s["name"], value: s["value"], hosts: s["hosts"], headers: s["headers"])
          end]
        else [k.to_sym, v]
        end
      end
    end

    # The keywords of Target#modify for a modify step's changes (durations
    # in seconds, nil clears).
    def modify_options(step)
      value(step["changes"] || {}).to_h do |k, v|
        case k
        when "memory_mb" then [:memory, v]
        when "env_set" then [:env, v]
        when "env_unset" then [:unset_env, v]
        when "labels_set" then [:labels, v]
        when "labels_unset" then [:unset_labels, v]
        when "network" then [:network, Conformance.typed_network(v)]
        else [k.to_sym, v]
        end
      end
    end

    def target(step)
      raise Failure, "no variable #{step['sandbox']}" unless @objects.key?(step["sandbox"])

      @objects[step["sandbox"]]
    end

    def as_handle(obj) = obj.is_a?(Burrow::Sandbox) ? obj.handle : obj

    def live(step)
      obj = target(step)
      raise Failure, "#{step['op']} needs a live sandbox, #{step['sandbox']} is a handle" unless obj.is_a?(Burrow::Sandbox)

      obj
    end

    # A snapshot as the cases see it: the core's field names and values.
    def snapshot_value(s)
      { "name" => s.name, "kind" => s.kind.to_s, "image" => s.image, "digest" => s.digest, "size" => s.size,
        "source_id" => s.source_id, "source_name" => s.source_name, "base_image" => s.base_image,
        "driver" => s.driver.to_s, "created_at_ms" => (s.created_at.to_r * 1000).to_i }
    end

    # A pool as the cases see it: the core's field names and values (its
    # configuration as an info's).
    def pool_value(p)
      { "name" => p.name, "config" => Conformance.neutral_config(p.config), "size" => p.size, "warm" => p.warm,
        "starting" => p.starting, "claims" => p.claims, "misses" => p.misses,
        "last_refill_ms" => p.last_refill && (p.last_refill * 1000).round,
        "created_at_ms" => (p.created_at.to_r * 1000).to_i }
    end

    def dispatch(step)
      op = step["op"]
      case op
      when "create" then return Result.new(:sandbox, Burrow::Sandbox.create(value(step["name"]), **build_options(step)))
      when "connect_or_create"
        return Result.new(:sandbox, Burrow::Sandbox.connect_or_create(value(step["name"]), **build_options(step)))
      when "define" then return Result.new(:handle, Burrow::Sandbox.define(value(step["name"]), **build_options(step)))
      when "get" then return Result.new(:handle, Burrow::Sandbox.get(value(step["name"])))
      when "get_by_id" then return Result.new(:handle, Burrow::Sandbox.get_by_id(value(step["id"])))
      when "list"
        page = Burrow::Sandbox.list(status: step["status"], labels: value(step["labels"]))
        return Result.new(:list, page.sandboxes)
      when "remove"
        if step.key?("name")
          Burrow::Sandbox.remove(value(step["name"]))
        else
          as_handle(target(step)).remove
        end
        return Result.new(:none, nil)
      when "wait" then return Result.new(:exec, @objects.fetch(step["process"]).wait)
      when "get_snapshot"
        return Result.new(:value, snapshot_value(Burrow::Sandbox.get_snapshot(value(step["snapshot"]))))
      when "list_snapshots" then return Result.new(:value, Burrow::Sandbox.snapshots.map(&:name))
      when "remove_snapshot" then return Result.new(:none, Burrow::Sandbox.remove_snapshot(value(step["snapshot"])))
      when "create_pool"
        pool = Burrow::Sandbox.create_pool(value(step["pool"]), value(step["size"]), **build_options(step))
        return Result.new(:value, pool_value(pool))
      when "get_pool" then return Result.new(:value, pool_value(Burrow::Sandbox.get_pool(value(step["pool"]))))
      when "list_pools" then return Result.new(:value, Burrow::Sandbox.list_pools.map(&:name))
      when "scale_pool"
        return Result.new(:value, pool_value(Burrow::Sandbox.scale_pool(value(step["pool"]), value(step["size"]))))
      when "remove_pool" then return Result.new(:none, Burrow::Sandbox.remove_pool(value(step["pool"])))
      end
      if op == "connect_or_start" && step.key?("name")
        return Result.new(:sandbox, Burrow::Sandbox.get(value(step["name"])).connect_or_start)
      end

      t = target(step)
      case op
      when "handle" then return Result.new(:handle, as_handle(t))
      when "info" then return Result.new(:info, t.info)
      when "status" then return Result.new(:value, t.info.status.to_s) # a fresh read
      when "config" then return Result.new(:value, Conformance.neutral_config(t.config))
      when "start" then return Result.new(:sandbox, as_handle(t).start)
      when "connect_or_start" then return Result.new(:sandbox, as_handle(t).connect_or_start)
      when "connect" then return Result.new(:sandbox, as_handle(t).connect)
      when "restart" then return Result.new(t.is_a?(Burrow::Sandbox) ? :info : :sandbox, t.restart)
      when "stop" then return Result.new(:info, t.stop(grace: step["grace"]))
      when "kill" then return Result.new(:info, t.kill)
      when "request_drain" then return Result.new(:info, t.request_drain)
      when "pause" then return Result.new(:info, t.pause)
      when "resume" then return Result.new(:info, t.resume)
      when "wait_until_stopped" then return Result.new(:info, t.wait_until_stopped)
      when "touch" then return Result.new(:none, t.touch)
      when "modify" then return Result.new(:plan, t.modify(**modify_options(step)))
      when "wait_for_status"
        timeout = step.key?("timeout") ? step["timeout"].to_f * @scale : nil
        return Result.new(:info, t.wait_for_status(*step["statuses"], timeout: timeout))
      when "destroy" then return Result.new(:none, t.destroy)
      when "follow_logs" then return Result.new(:value, follow_texts(t, step))
      when "snapshot"
        kind = step["kind"]&.to_sym
        return Result.new(:value, snapshot_value(t.snapshot(value(step["snapshot"]), kind: kind)))
      when "fork"
        # The copies' names, in order (bound by connect_or_start by name).
        return Result.new(:value, t.fork(step["count"], names: step["names"]).map(&:name))
      end

      sb = live(step)
      case op
      when "detach" then return Result.new(:info, sb.detach)
      when "ping" then return Result.new(:value, sb.ping.latency)
      when "exec", "spawn"
        argv = value(step["argv"])
        opts = {}
        %w[env cwd stdin].each { |k| opts[k.to_sym] = value(step[k]) if step.key?(k) }
        opts[:timeout] = step["timeout"].to_f if step.key?("timeout")
        opts[:output_limit] = Integer(value(step["output_limit"])) if step.key?("output_limit")
        return Result.new(:exec, sb.exec(argv, **opts)) if op == "exec"

        return Result.new(:process, sb.spawn(argv, **opts))
      end
      path = value(step["path"])
      case op
      when "fs_write" then Result.new(:none, sb.fs.write(path, value(step["data"])))
      when "fs_read" then Result.new(:value, sb.fs.read(path))
      when "fs_exists" then Result.new(:value, sb.fs.exist?(path))
      when "fs_mkdir" then Result.new(:none, sb.fs.mkdir(path, parents: step["parents"] ? true : false))
      when "fs_list" then Result.new(:list, sb.fs.list(path))
      when "fs_write_stream"
        Result.new(:value, sb.fs.write_stream(path, split_chunks(value(step["data"]).b, value(step["chunks"] || 1))))
      when "fs_read_stream" then Result.new(:value, sb.fs.open_read(path).each.reduce(+"".b, :<<))
      else raise Failure, "unknown op #{op}"
      end
    end

    # +data+ cut into +chunks+ pieces of ceil(len / chunks) bytes (the last
    # one shorter; none for empty data), as every interpreter cuts an
    # fs_write_stream's data.
    def split_chunks(data, chunks)
      size = [(data.bytesize + [chunks.to_i, 1].max - 1) / [chunks.to_i, 1].max, 1].max
      (0...data.bytesize).step(size).map { |i| data.byteslice(i, size) }
    end

    # The texts of a followed log's lines, once the stream ended by itself
    # (the followed run ended); past the step's bound, a Burrow::TimeoutError
    # (the follower thread is killed, which cancels its call).
    def follow_texts(target, step)
      limit = (step["timeout"] || FOLLOW_TIMEOUT).to_f * @scale
      follower = Thread.new { target.follow_logs(source: step["source"]).map(&:text) }
      return follower.value if follower.join(limit)

      follower.kill
      follower.join
      raise Burrow::TimeoutError.new("code" => "timeout", "message" => "follow_logs did not end within #{limit} s")
    end

    # -- race -----------------------------------------------------------------

    def generation(d)
      info = d.key?("name") ? Burrow::Sandbox.get(value(d["name"])).info : target(d).info
      info.generation
    rescue Burrow::NotFoundError
      0
    end

    # Runs one caller's step; reports plain data (it crosses a pipe).
    def race_call(d, keys)
      outcome = invoke(d)
      if outcome.error
        e = outcome.error
        return { "ok" => false, "code" => Conformance.code_of(e), "error" => Conformance.describe(e),
                 "class_ok" => Conformance.class_ok?(e) }
      end
      cache = {}
      fields = keys.to_h do |key|
        v = field(outcome.result, key, cache)
        [key, v.equal?(MISSING) ? nil : v]
      end
      fields["id"] = target(d).id if d.key?("sandbox") && keys.include?("id") && fields["id"].nil?
      { "ok" => true, "code" => nil, "fields" => fields }
    end

    def race(step, where)
      d = step["do"]
      n = step["callers"].to_i
      expect = step["expect"] || {}
      keys = (["id", "generation"] + (expect["each"] || {}).keys + (step["save"] || {}).values).uniq.sort
      before = generation(d)
      limit = 120 * @scale
      reports =
        if step["processes"]
          resolved = value(d)
          if %w[create connect_or_create].include?(resolved["op"])
            resolved["options"] = { "image" => @image }.merge(resolved["options"] || {})
          end
          rs = Conformance.race_in_processes(n, { "do" => resolved, "keys" => keys, "image" => @image,
                                                  "home" => @home }, limit)
          pids = rs.map { |r| r["pid"] }.uniq
          if pids.size != n || pids.include?(::Process.pid)
            raise Failure, "#{where}: the callers did not run in #{n} other processes: #{pids}"
          end

          rs
        else
          Array.new(n) { Thread.new { race_call(d, keys) } }.map(&:value)
        end
      after = generation(d)
      shown = JSON.generate(reports)[0, 3000]

      counts = Hash.new(0)
      reports.each do |r|
        counts[r["ok"] ? "ok" : (r["code"] || "unexpected_exception")] += 1
        raise Failure, "#{where}: an error of the wrong class: #{r['error']}" if !r["ok"] && r["class_ok"] == false
      end
      want = (expect["outcomes"] || { "ok" => n }).reject { |_, v| v.zero? }
      unless want == counts.reject { |_, v| v.zero? }
        raise Failure, "#{where}: outcomes #{counts.to_h}, expected #{want}: #{shown}"
      end

      oks = reports.select { |r| r["ok"] }.map { |r| r["fields"] }
      if expect["same_id"]
        ids = oks.map { |f| f["id"] }.uniq
        raise Failure, "#{where}: callers got different ids #{ids}: #{shown}" unless ids.size == 1

        if d.key?("name")
          holder = Burrow::Sandbox.get(value(d["name"])).id
          raise Failure, "#{where}: callers got #{ids}, the name is held by #{holder}" unless ids.include?(holder)
        end
      end
      if expect.key?("starts") && after - before != expect["starts"].to_i
        raise Failure, "#{where}: #{after - before} starts (generation #{before} -> #{after}), " \
                       "expected #{expect['starts']}: #{shown}"
      end
      oks.each_with_index do |fields, i|
        (expect["each"] || {}).each do |key, expected|
          match(expected, fields.key?(key) ? fields[key] : MISSING, "#{where}: caller #{i} field #{key}")
        end
      end
      (step["save"] || {}).each do |name, field|
        raise Failure, "#{where}: nothing to save #{name} from: no caller succeeded" if oks.empty?

        @values[name] = oks.first[field]
      end
    end
  end

  # Runs the task in +n+ fresh Ruby processes (race_caller.rb), released
  # together once every one of them has loaded the gem; their reports.
  def race_in_processes(n, task, limit)
    script = File.join(__dir__, "race_caller.rb")
    children = Array.new(n) do
      r_in, w_in = IO.pipe
      r_out, w_out = IO.pipe
      pid = ::Process.spawn(RbConfig.ruby, script, in: r_in, out: w_out)
      r_in.close
      w_out.close
      w_in.sync = true
      { pid: pid, stdin: w_in, stdout: r_out }
    end
    finished = false
    begin
      Timeout.timeout(limit, Failure, "the race callers did not finish within #{limit} s") do
        children.each { |c| c[:stdin].puts(JSON.generate(task)) }
        children.each do |c|
          line = c[:stdout].gets
          raise Failure, "a race caller exited before it was ready" unless line&.strip == "ready"
        end
        children.each { |c| c[:stdin].puts("go") } # the barrier
        reports = children.map do |c|
          line = c[:stdout].gets or raise Failure, "a race caller exited without a report"
          JSON.parse(line)
        end
        finished = true
        reports
      end
    ensure
      # Callers that reported exit by themselves (an owner's exit is part of
      # what a case checks); the others are killed.
      unless finished
        children.each do |c|
          ::Process.kill(:KILL, c[:pid])
        rescue Errno::ESRCH
          nil
        end
      end
      children.each do |c|
        ::Process.wait(c[:pid])
        c[:stdin].close
        c[:stdout].close
      end
    end
  end
end
