//! [`ThrottleLayer`].

use super::Throttle;
use crate::direct::DirectLimiter;
use crate::store::MemoryStore;
use tower_layer::Layer;

/// Makes every call through the wrapped service wait until `limiter`
/// admits it (cost 1 each). See the [module docs](crate::throttle).
#[derive(Debug)]
pub struct ThrottleLayer<St = MemoryStore> {
    limiter: DirectLimiter<St>,
}

impl<St: Clone> Clone for ThrottleLayer<St> {
    fn clone(&self) -> Self {
        ThrottleLayer {
            limiter: self.limiter.clone(),
        }
    }
}

impl<St> ThrottleLayer<St> {
    /// Calls wait for `limiter`; services made by clones of this layer, and
    /// clones of those services, share it.
    pub fn new(limiter: DirectLimiter<St>) -> Self {
        ThrottleLayer { limiter }
    }
}

impl<S, St: Clone> Layer<S> for ThrottleLayer<St> {
    type Service = Throttle<S, St>;

    fn layer(&self, inner: S) -> Self::Service {
        Throttle::new(inner, self.limiter.clone())
    }
}
