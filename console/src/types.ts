// The shapes the console reads, as core/server/src/openapi.json has them
// (only the fields the pages use are spelled out; the rest pass through).

export const STATUSES = [
  'created',
  'starting',
  'running',
  'draining',
  'paused',
  'stopped',
  'crashed',
] as const;
export type Status = (typeof STATUSES)[number];

export const LOG_SOURCES = ['stdout', 'stderr', 'guest', 'supervisor'] as const;
export type LogSource = (typeof LOG_SOURCES)[number];

export type Role = 'admin' | 'tenant_admin' | 'operator' | 'read_only';

/** `GET /ui/api/session`, `POST /ui/api/login`. */
export interface Session {
  token: string | null;
  tenant: string;
  role: Role;
  csrf: string | null;
  auth: boolean;
}

export interface ErrorBody {
  code: string;
  message: string;
  [more: string]: unknown;
}

export interface SandboxConfig {
  image: string;
  driver?: string | null;
  labels?: Record<string, string>;
  [more: string]: unknown;
}

export interface RunInfo {
  generation: number;
  supervisor_pid: number | null;
  started_at_ms: number;
  running_at_ms: number | null;
  ended_at_ms: number | null;
  exit_reason: string | null;
  detail: string | null;
  timings: Record<string, number> | null;
}

export interface SandboxInfo {
  id: string;
  name: string;
  status: Status;
  config: SandboxConfig;
  generation: number;
  detached: boolean;
  created_at_ms: number;
  updated_at_ms: number;
  last_run: RunInfo | null;
}

export interface SandboxList {
  sandboxes: SandboxInfo[];
}

export interface RunList {
  runs: RunInfo[];
}

export interface NetworkCounters {
  bytes_out: number;
  bytes_in: number;
  connections: number;
  refusals: number;
  dns_queries: number;
}

export interface Metrics {
  cpu_usage_ns: number | null;
  memory_bytes: number | null;
  memory_limit_bytes: number | null;
  io_read_bytes: number | null;
  io_write_bytes: number | null;
  pids: number | null;
  network?: NetworkCounters;
}

export interface LogLine {
  source: LogSource;
  text: string;
  time_ms?: number;
}

export type LogFrame = { line: LogLine } | { error: ErrorBody };

/** An event of `GET /v1/events`. */
export interface SandboxEvent {
  id: string;
  type: string;
  at_ms: number;
  tenant: string;
  sandbox: { id: string; name: string };
  status?: Status;
  previous?: Status;
  generation: number;
  reason?: string;
}

export interface RuntimeRow {
  state: string;
  generation: number;
  last_used_at: number;
  updated_at: number;
  owner: string | null;
  last_error: string | null;
}

export interface ColdStart {
  at_ms: number;
  ms: number;
}

/** A preview link as made (`POST /v1/gateway/targets/{id}/previews`). */
export interface PreviewView {
  id: string;
  url: string;
  origin: string;
  expires_at: number;
}

export interface TargetView {
  id: string;
  kind: 'sandbox' | 'url';
  port?: number;
  command?: string[];
  url?: string;
  metadata: Record<string, unknown>;
  created_at_ms: number;
  runtime: RuntimeRow | null;
  leases: number;
  cold_starts: ColdStart[];
}

export interface TargetList {
  targets: TargetView[];
}

export interface PoolInfo {
  name: string;
  config: SandboxConfig;
  size: number;
  warm: number;
  starting: number;
  claims: number;
  misses: number;
  last_refill_ms: number | null;
  created_at_ms: number;
}

export interface PoolList {
  pools: PoolInfo[];
}

export interface SnapshotInfo {
  name: string;
  kind: string;
  image: string;
  digest: string;
  size: number;
  source_id: string;
  source_name: string;
  base_image: string;
  driver: string;
  created_at_ms: number;
}

export interface SnapshotList {
  snapshots: SnapshotInfo[];
}

export interface DirEntry {
  name: string;
  kind: 'file' | 'dir' | 'symlink' | 'other';
  size: number;
}

export interface DirListing {
  path: string;
  entries: DirEntry[];
}
