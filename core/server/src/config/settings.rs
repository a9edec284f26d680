//! The settings: each one's key in the file and its environment variable.

/// One setting: its key path in the file and its environment variable.
#[derive(Debug, Clone, Copy)]
pub(super) struct Setting {
    pub(super) key: &'static str,
    pub(super) env: &'static str,
}

pub(super) const LISTEN: Setting = Setting {
    key: "listen",
    env: "BURROW_SERVE_LISTEN",
};
pub(super) const ALLOW_PUBLIC: Setting = Setting {
    key: "allow_public",
    env: "BURROW_SERVE_ALLOW_PUBLIC",
};
pub(super) const REUSE_PORT: Setting = Setting {
    key: "reuse_port",
    env: "BURROW_SERVE_REUSE_PORT",
};
pub(super) const DATABASE: Setting = Setting {
    key: "database",
    env: "BURROW_SERVE_DATABASE",
};
pub(super) const HOME: Setting = Setting {
    key: "home",
    env: "BURROW_HOME",
};
pub(super) const BACKEND: Setting = Setting {
    key: "backend",
    env: "BURROW_SERVE_BACKEND",
};
pub(super) const REPLICA_ID: Setting = Setting {
    key: "replica_id",
    env: "BURROW_SERVE_REPLICA_ID",
};
pub(super) const MAX_CONNECTIONS: Setting = Setting {
    key: "database_pool.max_connections",
    env: "BURROW_SERVE_MAX_CONNECTIONS",
};
pub(super) const ACQUIRE_TIMEOUT: Setting = Setting {
    key: "database_pool.acquire_timeout",
    env: "BURROW_SERVE_ACQUIRE_TIMEOUT",
};
pub(super) const AUTH_REQUIRED: Setting = Setting {
    key: "auth.required",
    env: "BURROW_SERVE_AUTH_REQUIRED",
};
pub(super) const REQUESTS_PER_MINUTE: Setting = Setting {
    key: "auth.requests_per_minute",
    env: "BURROW_SERVE_REQUESTS_PER_MINUTE",
};
pub(super) const AUDIT_RETENTION: Setting = Setting {
    key: "audit.retention",
    env: "BURROW_SERVE_AUDIT_RETENTION",
};
pub(super) const EVENTS_RETENTION: Setting = Setting {
    key: "events.retention",
    env: "BURROW_SERVE_EVENTS_RETENTION",
};
pub(super) const WEBHOOK_TIMEOUT: Setting = Setting {
    key: "webhooks.timeout",
    env: "BURROW_SERVE_WEBHOOK_TIMEOUT",
};
pub(super) const WEBHOOK_BACKOFF: Setting = Setting {
    key: "webhooks.backoff",
    env: "BURROW_SERVE_WEBHOOK_BACKOFF",
};
pub(super) const WEBHOOK_MAX_ATTEMPTS: Setting = Setting {
    key: "webhooks.max_attempts",
    env: "BURROW_SERVE_WEBHOOK_MAX_ATTEMPTS",
};
pub(super) const TLS_CERT: Setting = Setting {
    key: "tls.cert",
    env: "BURROW_SERVE_TLS_CERT",
};
pub(super) const TLS_KEY: Setting = Setting {
    key: "tls.key",
    env: "BURROW_SERVE_TLS_KEY",
};
pub(super) const STARTUP_TIMEOUT: Setting = Setting {
    key: "gateway.startup_timeout",
    env: "BURROW_SERVE_STARTUP_TIMEOUT",
};
pub(super) const RETRY_AFTER: Setting = Setting {
    key: "gateway.retry_after",
    env: "BURROW_SERVE_RETRY_AFTER",
};
pub(super) const LEASE_TTL: Setting = Setting {
    key: "gateway.lease_ttl",
    env: "BURROW_SERVE_LEASE_TTL",
};
pub(super) const MCP_SESSION_TTL: Setting = Setting {
    key: "gateway.mcp_session_ttl",
    env: "BURROW_SERVE_MCP_SESSION_TTL",
};
pub(super) const HEARTBEAT_INTERVAL: Setting = Setting {
    key: "gateway.heartbeat_interval",
    env: "BURROW_SERVE_HEARTBEAT_INTERVAL",
};
pub(super) const GATEWAY_LISTEN: Setting = Setting {
    key: "gateway.listen",
    env: "BURROW_SERVE_GATEWAY_LISTEN",
};
pub(super) const GATEWAY_DOMAIN: Setting = Setting {
    key: "gateway.domain",
    env: "BURROW_SERVE_GATEWAY_DOMAIN",
};
pub(super) const IDLE_TIMEOUT: Setting = Setting {
    key: "reaper.idle_timeout",
    env: "BURROW_SERVE_IDLE_TIMEOUT",
};
pub(super) const SWEEP_INTERVAL: Setting = Setting {
    key: "reaper.sweep_interval",
    env: "BURROW_SERVE_SWEEP_INTERVAL",
};
pub(super) const LOG_FORMAT: Setting = Setting {
    key: "log.format",
    env: "BURROW_SERVE_LOG_FORMAT",
};
pub(super) const OUTBOUND_ALLOW: Setting = Setting {
    key: "outbound.allow",
    env: "BURROW_SERVE_OUTBOUND_ALLOW",
};
pub(super) const KUBECONFIG: Setting = Setting {
    key: "kubernetes.kubeconfig",
    env: "BURROW_KUBECONFIG",
};
pub(super) const KUBE_CONTEXT: Setting = Setting {
    key: "kubernetes.context",
    env: "BURROW_KUBE_CONTEXT",
};
pub(super) const KUBE_NAMESPACE: Setting = Setting {
    key: "kubernetes.namespace",
    env: "BURROW_KUBE_NAMESPACE",
};
pub(super) const KUBE_RUNTIME_CLASS: Setting = Setting {
    key: "kubernetes.runtime_class",
    env: "BURROW_KUBE_RUNTIME_CLASS",
};
pub(super) const KUBE_GVISOR_RUNTIME_CLASS: Setting = Setting {
    key: "kubernetes.gvisor_runtime_class",
    env: "BURROW_KUBE_GVISOR_RUNTIME_CLASS",
};
pub(super) const KUBE_IMAGE_PULL_POLICY: Setting = Setting {
    key: "kubernetes.image_pull_policy",
    env: "BURROW_KUBE_IMAGE_PULL_POLICY",
};
pub(super) const KUBE_AGENT_IMAGE: Setting = Setting {
    key: "kubernetes.agent_image",
    env: "BURROW_KUBE_AGENT_IMAGE",
};

/// Every setting, in the order `describe` and the docs use.
pub(super) const SETTINGS: &[Setting] = &[
    LISTEN,
    ALLOW_PUBLIC,
    REUSE_PORT,
    DATABASE,
    HOME,
    BACKEND,
    REPLICA_ID,
    MAX_CONNECTIONS,
    ACQUIRE_TIMEOUT,
    AUTH_REQUIRED,
    REQUESTS_PER_MINUTE,
    AUDIT_RETENTION,
    EVENTS_RETENTION,
    WEBHOOK_TIMEOUT,
    WEBHOOK_BACKOFF,
    WEBHOOK_MAX_ATTEMPTS,
    TLS_CERT,
    TLS_KEY,
    STARTUP_TIMEOUT,
    RETRY_AFTER,
    MCP_SESSION_TTL,
    LEASE_TTL,
    HEARTBEAT_INTERVAL,
    GATEWAY_LISTEN,
    GATEWAY_DOMAIN,
    IDLE_TIMEOUT,
    SWEEP_INTERVAL,
    LOG_FORMAT,
    OUTBOUND_ALLOW,
    KUBECONFIG,
    KUBE_CONTEXT,
    KUBE_NAMESPACE,
    KUBE_RUNTIME_CLASS,
    KUBE_GVISOR_RUNTIME_CLASS,
    KUBE_IMAGE_PULL_POLICY,
    KUBE_AGENT_IMAGE,
];

/// Tables of the file (`[name]`); every other top-level key is a value.
pub(super) const TABLES: &[&str] = &[
    "database_pool",
    "auth",
    "audit",
    "events",
    "webhooks",
    "tls",
    "gateway",
    "reaper",
    "log",
    "outbound",
    "kubernetes",
];
