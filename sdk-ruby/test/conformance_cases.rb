# frozen_string_literal: true

# The vocabulary of the language-neutral lifecycle cases
# (tests/conformance/cases.json, documented in tests/conformance/README.md)
# and the structural check of a cases document against it: the Ruby twin of
# the Rust kit's core/conformance/src/cases.rs. conformance_runner.rb
# interprets the cases.

require "json"
require "set"

module Conformance
  NAME_OPS = %w[create connect_or_create define get get_by_id list get_snapshot list_snapshots remove_snapshot
                create_pool get_pool list_pools scale_pool remove_pool].freeze
  TARGET_OPS = %w[handle info status config start connect_or_start connect restart stop kill request_drain
                  pause resume touch modify wait_for_status wait_until_stopped destroy detach ping exec spawn
                  fs_write fs_read fs_exists fs_mkdir fs_list fs_write_stream fs_read_stream follow_logs
                  snapshot fork].freeze
  CONTROL_OPS = %w[wait await sleep repeat race remove].freeze
  KNOWN_OPS = (NAME_OPS + TARGET_OPS + CONTROL_OPS).to_set.freeze
  PROCESS_RACE_OPS = %w[create connect_or_create connect_or_start].freeze
  COMMON_KEYS = %w[op as save expect tolerate within background].freeze
  OP_KEYS = {
    "create" => %w[name options], "connect_or_create" => %w[name options], "define" => %w[name options],
    "get" => %w[name], "get_by_id" => %w[id], "list" => %w[status labels], "remove" => %w[name sandbox],
    "stop" => %w[sandbox grace], "modify" => %w[sandbox changes], "wait_for_status" => %w[sandbox statuses timeout],
    "exec" => %w[sandbox argv stdin env cwd timeout output_limit], "spawn" => %w[sandbox argv env cwd timeout],
    "fs_write" => %w[sandbox path data], "fs_read" => %w[sandbox path], "fs_exists" => %w[sandbox path],
    "fs_mkdir" => %w[sandbox path parents], "fs_list" => %w[sandbox path], "wait" => %w[process],
    "fs_write_stream" => %w[sandbox path data chunks], "fs_read_stream" => %w[sandbox path],
    "await" => %w[job], "sleep" => %w[seconds], "repeat" => %w[seconds interval do],
    "race" => %w[callers processes do], "connect_or_start" => %w[sandbox name],
    "follow_logs" => %w[sandbox source timeout], "snapshot" => %w[sandbox snapshot kind],
    "get_snapshot" => %w[snapshot], "remove_snapshot" => %w[snapshot], "list_snapshots" => [],
    "fork" => %w[sandbox count names], "create_pool" => %w[pool size options], "get_pool" => %w[pool],
    "list_pools" => [], "scale_pool" => %w[pool size], "remove_pool" => %w[pool]
  }.freeze
  CREATE_OPTIONS = %w[image cpus memory_mb pids_limit disk_mb best_effort_limits default_limits seccomp_allow env workdir
                      labels network ports secrets idle_timeout idle_action max_duration startup_timeout demand_start
                      detached replace].freeze
  # The changes a modify step may name (durations in seconds; null clears
  # cpus, memory_mb, idle_timeout and max_duration).
  MODIFY_CHANGES = %w[cpus memory_mb env_set env_unset labels_set labels_unset idle_timeout idle_action
                      max_duration network].freeze
  RACE_EXPECT_KEYS = %w[outcomes same_id starts each].freeze
  CAPABILITY_TAGS = %w[pause modify_live metrics logs idle_reclaim attached persistent_layer network_policy
                       published_ports secrets snapshots full_snapshots fork pools].freeze

  module_function

  def cases_path
    ENV["BURROW_CONFORMANCE_CASES"] || File.expand_path("../../tests/conformance/cases.json", __dir__)
  end

  def load_document(path = cases_path) = JSON.parse(File.read(path))

  # The capability a step needs by itself (as the Rust kit's step_capability).
  def step_capability(step)
    options = step["options"] || {}
    return "pause" if %w[pause resume].include?(step["op"])
    return "modify_live" if step["op"] == "modify"
    return "logs" if step["op"] == "follow_logs"
    return "attached" if step["op"] == "detach"
    return "full_snapshots" if step["op"] == "snapshot" && step["kind"] == "full"
    return "snapshots" if %w[snapshot get_snapshot list_snapshots remove_snapshot].include?(step["op"])
    return "fork" if step["op"] == "fork"
    return "pools" if %w[create_pool get_pool list_pools scale_pool remove_pool].include?(step["op"])
    if step["op"] == "race" && step["processes"]
      d = step["do"] || {}
      owns = %w[create connect_or_create].include?(d["op"]) && !(d["options"] || {})["detached"]
      return owns ? "attached" : nil
    end
    return "network_policy" if options["network"].is_a?(Hash)
    return "published_ports" if options.key?("ports")
    return "secrets" if options.key?("secrets")
    return "idle_reclaim" if %w[idle_timeout idle_action demand_start].any? { |k| options.key?(k) }

    nil
  end

  # Structural problems of a cases document (empty when it is well formed).
  def validate_cases(doc, repo_root)
    problems = []
    problems << "unknown format #{doc['format'].inspect}" unless doc["format"] == "burrow-conformance/1"
    seen = {}
    doc["cases"].each_with_index do |c, i|
      where = c["id"] || "case ##{i}"
      %w[id title reference steps].each { |k| problems << "#{where}: missing #{k}" unless c.key?(k) }
      extra = c.keys - %w[id title reference steps tags timeout notes]
      problems << "#{where}: unknown keys #{extra}" unless extra.empty?
      problems << "#{where}: duplicate id" if seen[where]
      seen[where] = true
      file, fn = c["reference"].to_s.split("::")
      text = begin
        File.read(File.join(repo_root, file.to_s))
      rescue SystemCallError
        problems << "#{where}: reference #{c['reference']} is not path::function"
        nil
      end
      problems << "#{where}: #{file} has no fn #{fn}" if text && !(fn && text.include?("fn #{fn}("))
      (c["tags"] || []).each do |t|
        problems << "#{where}: unknown tag #{t}" unless ["processes", "idle", *CAPABILITY_TAGS].include?(t)
      end
      bound = Set.new
      c["steps"].each_with_index do |s, j|
        problems.concat(validate_step(s, "#{where} step #{j + 1}", bound, top: true))
        problems.concat(check_capability_tags(s, "#{where} step #{j + 1}", c["tags"] || []))
      end
    end
    problems
  end

  def check_capability_tags(step, where, tags)
    out = []
    cap = step_capability(step)
    if cap && !(step["tolerate"] || []).include?("unsupported") && !tags.include?(cap)
      out << "#{where}: #{step['op']} needs the capability tag #{cap} on its case"
    end
    out.concat(check_capability_tags(step["do"], "#{where} do", tags)) if step["do"].is_a?(Hash)
    out
  end

  def validate_step(step, where, bound, top:)
    op = step["op"]
    return ["#{where}: unknown op #{op}"] unless KNOWN_OPS.include?(op)

    out = []
    allowed = COMMON_KEYS + OP_KEYS.fetch(op, %w[sandbox])
    extra = step.keys - allowed
    out << "#{where}: #{op}: unknown keys #{extra}" unless extra.empty?
    if TARGET_OPS.include?(op) && op != "connect_or_start" && !step.key?("sandbox")
      out << "#{where}: #{op} needs 'sandbox'"
    end
    if op == "connect_or_start" && step.key?("sandbox") == step.key?("name")
      out << "#{where}: connect_or_start needs exactly one of 'sandbox', 'name'"
    end
    if step.key?("sandbox") && top && !bound.include?(step["sandbox"])
      out << "#{where}: variable #{step['sandbox']} is not bound by an earlier step"
    end
    bad = (step["options"] || {}).keys - CREATE_OPTIONS
    out << "#{where}: unknown options #{bad}" unless bad.empty?
    if step.key?("changes")
      if step["changes"].is_a?(Hash)
        bad = step["changes"].keys - MODIFY_CHANGES
        out << "#{where}: unknown changes #{bad}" unless bad.empty?
      else
        out << "#{where}: changes must be an object"
      end
    end
    out << "#{where}: 'within' and 'background' do not combine" if step.key?("within") && step.key?("background")
    if %w[repeat race].include?(op)
      if step["do"].is_a?(Hash)
        out.concat(validate_step(step["do"], "#{where} do", bound, top: false))
        out << "#{where}: the 'do' of a #{op} cannot bind with 'as'" if step["do"].key?("as")
      else
        out << "#{where}: #{op} needs a 'do' step"
      end
    end
    if op == "race"
      bad = (step["expect"] || {}).keys - RACE_EXPECT_KEYS
      out << "#{where}: race: unknown expect keys #{bad}" unless bad.empty?
      d = step["do"] || {}
      if step["processes"] && (!PROCESS_RACE_OPS.include?(d["op"]) || !d.key?("name"))
        out << "#{where}: a race in processes runs only #{PROCESS_RACE_OPS} by name"
      end
    end
    bound << step["as"] if step.key?("as")
    out
  end
end
