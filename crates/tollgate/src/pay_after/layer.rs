//! [`MeterLayer`].

use super::MeterService;
use std::num::NonZeroU64;
use tower_layer::Layer;

/// Holds a request's [`Meter`](super::Meter) until its response's body has
/// been sent, so that a cost reported while the body streams is settled
/// when it ends (or fails, or the client goes), and optionally counts the
/// body's bytes into it. Put it inside the rate-limit layer (the meter is
/// in the request's extensions by then); a request without a meter passes
/// untouched.
///
/// When the body ends, the layer also waits for the settlement to land
/// (a store that does I/O; at most the rate-limit layer's store timeout)
/// before it ends the body, so that the client's next request finds the
/// cost charged.
///
/// ```
/// use tollgate::pay_after::MeterLayer;
///
/// // One unit per KiB sent, on top of what handlers report.
/// let layer = MeterLayer::new().count_bytes(1024);
/// # let _ = layer;
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct MeterLayer {
    bytes_per_unit: Option<NonZeroU64>,
}

impl MeterLayer {
    /// A layer that holds the meter until the body has been sent and
    /// counts nothing itself.
    pub fn new() -> Self {
        MeterLayer::default()
    }

    /// Also adds one unit per `bytes_per_unit` bytes of the response's
    /// body (the last part rounded up), when the body ends. 0 counts no
    /// bytes.
    pub fn count_bytes(self, bytes_per_unit: u64) -> Self {
        MeterLayer {
            bytes_per_unit: NonZeroU64::new(bytes_per_unit),
        }
    }
}

impl<S> Layer<S> for MeterLayer {
    type Service = MeterService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        MeterService::new(inner, self.bytes_per_unit)
    }
}
