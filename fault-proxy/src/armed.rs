//! [`ArmedFault`]: a test's handle on one armed fault.

use std::fmt;
use std::sync::Weak;

use tokio::sync::watch;

use crate::error::FaultProxyError;
use crate::plan::{FaultFired, Injection, Method};
use crate::shared::{FireState, Shared, lock};

/// A fault armed with [`FaultProxy::inject`](crate::FaultProxy::inject).
///
/// Dropping the handle does not disarm the fault, but it releases a [`Fault::HoldResponse`](crate::Fault::HoldResponse).
pub struct ArmedFault {
    pub(crate) id: u64,
    pub(crate) method: Method,
    pub(crate) injection: Injection,
    pub(crate) report: watch::Receiver<FireState>,
    pub(crate) release: watch::Sender<bool>,
    pub(crate) shared: Weak<Shared>,
}

impl fmt::Debug for ArmedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArmedFault")
            .field("id", &self.id)
            .field("method", &self.method)
            .field("injection", &self.injection)
            .field("state", &*self.report.borrow())
            .finish_non_exhaustive()
    }
}

impl ArmedFault {
    /// Waits until the fault has been applied, and says what happened.
    ///
    /// For faults that reset the connection this resolves after the socket was reset; for
    /// [`Fault::DropResponse`](crate::Fault::DropResponse) and friends, after the upstream answered in full and the answer
    /// was discarded; for [`Fault::Stall`](crate::Fault::Stall), once the client gave up.
    ///
    /// # Errors
    /// - [`FaultProxyError::NotApplied`]: the fault matched a request but could not be applied.
    /// - [`FaultProxyError::Disarmed`]: the fault was disarmed first.
    /// - [`FaultProxyError::Stopped`]: the proxy stopped first.
    pub async fn fired(&self) -> Result<FaultFired, FaultProxyError> {
        let mut report = self.report.clone();
        let state = report
            .wait_for(|state| !matches!(state, FireState::Armed))
            .await
            .map_err(|_| FaultProxyError::Stopped)?;
        match &*state {
            FireState::Fired(fired) => Ok(fired.clone()),
            FireState::NotApplied(reason) => Err(FaultProxyError::NotApplied {
                reason: reason.clone(),
            }),
            FireState::Disarmed => Err(FaultProxyError::Disarmed),
            FireState::Armed => Err(FaultProxyError::Stopped),
        }
    }

    /// Passes on the answer a [`Fault::HoldResponse`](crate::Fault::HoldResponse) holds (at once if it is held, as soon as
    /// it is if the fault has not fired yet). Does nothing for other faults.
    pub fn release(&self) {
        self.release.send_replace(true);
    }

    /// Whether the fault has been applied (not merely matched).
    pub fn has_fired(&self) -> bool {
        matches!(*self.report.borrow(), FireState::Fired(_))
    }

    /// Removes the fault if it has not matched a request yet; returns whether it did.
    pub fn disarm(&self) -> bool {
        let Some(shared) = self.shared.upgrade() else {
            return false;
        };
        let mut state = lock(&shared.state);
        let Some(index) = state.armed.iter().position(|entry| entry.id == self.id) else {
            return false;
        };
        let entry = state.armed.remove(index);
        entry.report.send_replace(FireState::Disarmed);
        true
    }
}
