//! `burrow serve`: the burrow engine behind a versioned HTTP API, with a
//! demand gateway (`/gw/{id}/...`), request leases, and an idle reaper that
//! any number of replicas can run against one Postgres database.
