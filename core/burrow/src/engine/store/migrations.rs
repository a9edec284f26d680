//! SQL migrations embedded in the binary, read as `sqlx::migrate!` reads a
//! directory, without its proc macro (which compiles sqlx's Postgres and
//! SQLite drivers a second time, for the host, in every build).

use std::borrow::Cow;

use sqlx::migrate::{Migration, MigrationType, Migrator};

/// A migrator over `files`: (file name, SQL) pairs, the file names as
/// `sqlx::migrate!` wants them (`<version>_<description>.sql`, the
/// description's `_` read as spaces; `.up.sql`/`.down.sql` for
/// reversible ones; SQL starting with `-- no-transaction` runs outside a
/// transaction). The checksums (SHA-384 of the SQL) are the macro's, so
/// databases it migrated are recognised.
///
/// # Panics
/// On a file name without a numeric version: a bug of the caller's
/// constant list, caught by its first test.
pub fn embedded(files: &[(&'static str, &'static str)]) -> Migrator {
    let mut migrations: Vec<Migration> = files
        .iter()
        .map(|(file, sql)| {
            let (version, rest) = file
                .split_once('_')
                .unwrap_or_else(|| panic!("migration {file:?}: no <version>_ prefix"));
            let version: i64 = version
                .parse()
                .unwrap_or_else(|_| panic!("migration {file:?}: the version is not a number"));
            let kind = MigrationType::from_filename(rest);
            let description = rest.trim_end_matches(kind.suffix()).replace('_', " ");
            Migration::new(
                version,
                Cow::Owned(description),
                kind,
                Cow::Borrowed(sql),
                sql.starts_with("-- no-transaction"),
            )
        })
        .collect();
    migrations.sort_by_key(|m| m.version);
    Migrator {
        migrations: Cow::Owned(migrations),
        ..Migrator::DEFAULT
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn files_read_as_the_macro_reads_them() {
        let m = embedded(&[
            (
                "0002_more_tables.sql",
                "-- no-transaction\nCREATE INDEX x ON t(a);",
            ),
            ("0001_init.sql", "CREATE TABLE t (a INTEGER);"),
        ]);
        let got: Vec<_> = m
            .migrations
            .iter()
            .map(|m| {
                (
                    m.version,
                    m.description.to_string(),
                    m.no_tx,
                    m.migration_type,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "init".to_owned(), false, MigrationType::Simple),
                (2, "more tables".to_owned(), true, MigrationType::Simple)
            ]
        );
        // SHA-384 of the SQL, as the macro computes it (what databases
        // it migrated have recorded).
        let hex: String = m.migrations[0]
            .checksum
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            hex,
            "b0ed7bd50572279eb890b21694792ba9cbdb4e7fd5c62c381f08a0ab38dbc5da84fe0f21b4441ea20e2ccfb56adcd112"
        );
        let again = embedded(&[("0001_init.sql", "CREATE TABLE t (a INTEGER);")]);
        assert_eq!(again.migrations[0].checksum, m.migrations[0].checksum);
    }
}
