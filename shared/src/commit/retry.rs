//! One retry policy for every commit, read from the table's `commit.retry.*` properties
//! (Iceberg's names, parsed by iceberg's `TableProperties`), with our defaults where a table
//! sets none: a Lambda fleet contends on hot tables, so more attempts than Iceberg's 4.

use std::time::{Duration, Instant};

use iceberg::spec::{TableMetadata, TableProperties};
use tracing::warn;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetryPolicy {
    /// Attempts after the first: lost swaps and replans count alike.
    pub num_retries: u32,
    pub min_wait: Duration,
    pub max_wait: Duration,
    pub total_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            num_retries: 20,
            min_wait: Duration::from_millis(50),
            max_wait: Duration::from_millis(5_000),
            total_timeout: Duration::from_millis(600_000),
        }
    }
}

impl RetryPolicy {
    pub(crate) fn of(metadata: &TableMetadata) -> RetryPolicy {
        let ours = RetryPolicy::default();
        let props = metadata.properties();
        if !props.keys().any(|k| k.starts_with("commit.retry.")) {
            return ours;
        }
        let parsed = match metadata.table_properties() {
            Ok(p) => p,
            Err(e) => {
                warn!(error = %e, "invalid commit.retry.* table property; using the defaults");
                return ours;
            }
        };
        let set = |k: &str| props.contains_key(k);
        RetryPolicy {
            num_retries: if set(TableProperties::PROPERTY_COMMIT_NUM_RETRIES) {
                u32::try_from(parsed.commit_num_retries).unwrap_or(u32::MAX)
            } else {
                ours.num_retries
            },
            min_wait: if set(TableProperties::PROPERTY_COMMIT_MIN_RETRY_WAIT_MS) {
                Duration::from_millis(parsed.commit_min_retry_wait_ms)
            } else {
                ours.min_wait
            },
            max_wait: if set(TableProperties::PROPERTY_COMMIT_MAX_RETRY_WAIT_MS) {
                Duration::from_millis(parsed.commit_max_retry_wait_ms)
            } else {
                ours.max_wait
            },
            total_timeout: if set(TableProperties::PROPERTY_COMMIT_TOTAL_RETRY_TIME_MS) {
                Duration::from_millis(parsed.commit_total_retry_timeout_ms)
            } else {
                ours.total_timeout
            },
        }
    }

    /// Full jitter over an exponential cap: contenders spread out instead of colliding again in
    /// lockstep.
    pub(crate) fn backoff(&self, retry: u32) -> Duration {
        let min = self.min_wait.as_millis() as u64;
        let exp = min.saturating_mul(2u64.saturating_pow(retry.saturating_sub(1).min(16)));
        let cap = exp.min(self.max_wait.as_millis() as u64).max(1);
        Duration::from_millis(rand::random_range(cap / 2..=cap))
    }
}

/// Attempts spent by one commit, across lost swaps and replans.
#[derive(Debug)]
pub(crate) struct Budget {
    policy: RetryPolicy,
    started: Instant,
    retries: u32,
}

impl Budget {
    pub(crate) fn new(policy: RetryPolicy) -> Budget {
        Budget {
            policy,
            started: Instant::now(),
            retries: 0,
        }
    }

    /// The table's policy may change between attempts (an operator raising the retries).
    pub(crate) fn update(&mut self, policy: RetryPolicy) {
        self.policy = policy;
    }

    /// Counts one retry; `false` when the budget is spent.
    pub(crate) fn retry(&mut self) -> bool {
        self.retries += 1;
        self.retries <= self.policy.num_retries
            && self.started.elapsed() < self.policy.total_timeout
    }

    pub(crate) fn retries(&self) -> u32 {
        self.retries
    }

    pub(crate) async fn wait(&self) {
        tokio::time::sleep(self.policy.backoff(self.retries)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(props: &[(&str, &str)]) -> TableMetadata {
        use iceberg::spec::{
            NestedField, PrimitiveType, Schema, SortOrder, TableMetadataBuilder, Type,
            UnboundPartitionSpec,
        };
        let schema = Schema::builder()
            .with_fields(vec![std::sync::Arc::new(NestedField::required(
                1,
                "id",
                Type::Primitive(PrimitiveType::Long),
            ))])
            .build()
            .unwrap();
        TableMetadataBuilder::new(
            schema,
            UnboundPartitionSpec::builder().build(),
            SortOrder::unsorted_order(),
            "file:///tmp/t".into(),
            iceberg::spec::FormatVersion::V2,
            props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata
    }

    #[test]
    fn our_defaults_unless_the_table_sets_iceberg_properties() {
        assert_eq!(RetryPolicy::of(&metadata(&[])), RetryPolicy::default());
        let p = RetryPolicy::of(&metadata(&[
            ("commit.retry.num-retries", "3"),
            ("commit.retry.min-wait-ms", "10"),
        ]));
        assert_eq!(p.num_retries, 3);
        assert_eq!(p.min_wait, Duration::from_millis(10));
        assert_eq!(p.max_wait, RetryPolicy::default().max_wait);
        // An unreadable value falls back to the defaults instead of failing the commit.
        assert_eq!(
            RetryPolicy::of(&metadata(&[("commit.retry.num-retries", "many")])),
            RetryPolicy::default()
        );
    }

    #[test]
    fn the_budget_counts_every_retry() {
        let mut b = Budget::new(RetryPolicy {
            num_retries: 2,
            ..RetryPolicy::default()
        });
        assert!(b.retry());
        assert!(b.retry());
        assert!(!b.retry());
        assert_eq!(b.retries(), 3);
    }

    #[test]
    fn backoff_stays_within_the_cap() {
        let p = RetryPolicy::default();
        for r in 1..30 {
            assert!(p.backoff(r) <= p.max_wait);
        }
        assert!(p.backoff(1) <= p.min_wait);
    }
}
