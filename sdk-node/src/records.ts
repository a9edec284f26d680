// The core's records (snake_case JSON) in the SDK's types. Internal.

import type {
  Capabilities,
  ExecResult,
  FileStat,
  Metrics,
  PoolInfo,
  SandboxConfig,
  SandboxInfo,
  SnapshotInfo,
} from "./types";

export function toBuffer(data: Buffer | string): Buffer {
  return typeof data === "string" ? Buffer.from(data, "utf8") : data;
}

/** A record's duration (whole milliseconds in the core's JSON) in seconds. */
export function recordSeconds(ms: number | null | undefined): number | null {
  return ms == null ? null : ms / 1000;
}

export const date = (ms: number): Date => new Date(ms);
export const optDate = (ms: number | null | undefined): Date | null => (ms == null ? null : new Date(ms));
export const opt = <T>(v: T | null | undefined): T | null => (v === undefined ? null : v);

export function toConfig(c: any): SandboxConfig {
  return {
    image: c.image,
    driver: opt(c.driver),
    runtime: c.runtime,
    cpus: opt(c.cpus),
    memory: opt(c.memory_mb),
    pidsLimit: opt(c.pids_limit),
    diskMb: opt(c.disk_mb),
    defaultLimits: c.default_limits ?? true,
    seccompAllow: c.seccomp_allow ?? [],
    env: c.env ?? {},
    workdir: opt(c.workdir),
    labels: c.labels ?? {},
    mounts: (c.mounts ?? []).map((m: any) => ({ source: m.source, target: m.target, readOnly: !!m.read_only })),
    network:
      c.network && typeof c.network === "object"
        ? { allow: c.network.allow ?? [], deny: c.network.deny ?? [] }
        : c.network === true || c.network === "all",
    ports: c.ports ?? [],
    secrets: (c.secrets ?? []).map((s: any) => ({
      name: s.name,
      hosts: s.hosts ?? [],
      headers: s.headers ?? [],
      placeholder: s.placeholder ?? null,
    })),
    idleTimeout: recordSeconds(c.idle_timeout),
    idleAction: c.idle_action ?? "stop",
    maxDuration: recordSeconds(c.max_duration),
    demandStart: opt(c.demand_start),
    startupTimeout: c.startup_timeout / 1000,
  };
}

export function toInfo(i: any): SandboxInfo {
  const r = i.last_run;
  return {
    id: i.id,
    name: i.name,
    status: i.status,
    config: toConfig(i.config),
    generation: i.generation,
    detached: i.detached,
    createdAt: date(i.created_at_ms),
    updatedAt: date(i.updated_at_ms),
    lastRun: r
      ? {
          generation: r.generation,
          supervisorPid: opt(r.supervisor_pid),
          startedAt: date(r.started_at_ms),
          runningAt: optDate(r.running_at_ms),
          endedAt: optDate(r.ended_at_ms),
          exitReason: opt(r.exit_reason),
          detail: opt(r.detail),
        }
      : null,
  };
}

export function toMetrics(m: any): Metrics {
  return {
    cpuUsageNs: opt(m.cpu_usage_ns),
    memoryBytes: opt(m.memory_bytes),
    memoryLimitBytes: opt(m.memory_limit_bytes),
    ioReadBytes: opt(m.io_read_bytes),
    ioWriteBytes: opt(m.io_write_bytes),
    pids: opt(m.pids),
    diskBytes: opt(m.disk_bytes),
    diskLimitBytes: opt(m.disk_limit_bytes),
  };
}

export function toStat(s: any): FileStat {
  return {
    kind: s.kind,
    size: s.size,
    mode: s.mode,
    uid: s.uid,
    gid: s.gid,
    mtime: new Date(s.mtime * 1000),
    linkTarget: opt(s.link_target),
  };
}

export function exec(r: any): ExecResult {
  return {
    stdout: r.stdout,
    stderr: r.stderr,
    exitCode: r.exitCode ?? null,
    signal: r.signal ?? null,
    timedOut: r.timedOut,
    truncated: !!r.truncated,
  };
}

export function toCapabilities(c: any): Capabilities {
  return {
    pause: !!c.pause,
    modifyLive: !!c.modify_live,
    metrics: !!c.metrics,
    logs: !!c.logs,
    idleReclaim: !!c.idle_reclaim,
    attached: !!c.attached,
    persistentLayer: c.persistent_layer ?? true,
    networkPolicy: !!c.network_policy,
    publishedPorts: !!c.published_ports,
    secrets: !!c.secrets,
    snapshots: !!c.snapshots,
    fullSnapshots: !!c.full_snapshots,
    fork: !!c.fork,
    pools: !!c.pools,
  };
}

export function toSnapshot(s: any): SnapshotInfo {
  return {
    name: s.name,
    kind: s.kind,
    image: s.image,
    digest: s.digest,
    size: s.size,
    sourceId: s.source_id,
    sourceName: s.source_name,
    baseImage: s.base_image,
    driver: s.driver,
    createdAt: date(s.created_at_ms),
  };
}

export function toPool(p: any): PoolInfo {
  return {
    name: p.name,
    config: toConfig(p.config),
    size: p.size,
    warm: p.warm,
    starting: p.starting,
    claims: p.claims,
    misses: p.misses,
    lastRefill: recordSeconds(p.last_refill_ms),
    createdAt: date(p.created_at_ms),
  };
}
