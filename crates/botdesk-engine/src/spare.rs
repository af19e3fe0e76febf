//! A spare computer: one made and started in advance on this machine's engine, so a new bot's
//! computer is ready at once. Docker's own part of a start (the computer's network, its published
//! gateway port, the container) takes longer than a plain `docker run`, and a spare takes all of
//! it off the path.
//!
//! The app keeps one while it runs ([`Engine::keep_spare`], called by its keeper task); the CLI
//! never makes one but its new computers take one too. A new computer on this machine takes the
//! spare whole in the database's transaction that creates it (`botdesk_store::Spare`): its id and
//! home volume, so its container, volume and network, all labelled with that id, are its own.
//! Unused, a spare is one idle computer (about 40 MiB, no CPU); the `spare_computer` setting turns
//! it off, and the spare goes.

use crate::{Engine, Result};
use botdesk_core::{CallCtx, ComputerRef, ComputerScope, ComputerSpec, HostName, MachineStatus};
use botdesk_store::Spare;

impl Engine {
    /// One pass of the keeper: makes sure one spare computer is up on this machine, made with the
    /// image and resources in force, or that there is none when the setting is off. Only with Docker.
    pub async fn keep_spare(&self) -> Result<()> {
        let Some(machine) = &self.inner.machine else { return Ok(()) };
        let image = machine.image_tag();
        let wanted = self.settings()?.spare_computer;
        let resources = self.inner.limits.resources();
        let mut ours = None;
        for s in self.inner.store.spares().await? {
            if wanted && ours.is_none() && s.host.is_local() && s.fits(&image, &resources) {
                ours = Some(s);
            } else {
                self.drop_spare(&s).await?;
            }
        }
        if !wanted {
            return Ok(());
        }
        let spare = match ours {
            Some(s) => s,
            None => {
                let id = botdesk_store::new_computer_id();
                let home_volume = self.new_home_volume(&id);
                let s = Spare { id, host: HostName::local(), home_volume, image, memory_bytes: resources.memory_bytes as i64, nano_cpus: resources.nano_cpus };
                // Recorded first: a reconcile meanwhile keeps its parts.
                self.inner.store.add_spare(&s, self.now()).await?;
                s
            }
        };
        let cref = ComputerRef::local(spare.id.clone());
        if self.inner.provider.status(&cref).await? != MachineStatus::Running {
            let spec = ComputerSpec {
                id: spare.id.clone(),
                name: "spare".into(),
                scope: ComputerScope::Private,
                home_volume: spare.home_volume.clone(),
                resources,
                host: spare.host.clone(),
            };
            self.inner.provider.provision(&spec, &CallCtx::default()).await.map_err(|e| crate::EngineError::from(e).context("making a spare computer"))?;
        }
        tracing::debug!(computer = %spare.id, "a spare computer is ready");
        Ok(())
    }

    /// Removes every spare, wherever it is (the bench, when it is done with them).
    pub async fn drop_spares(&self) -> Result<()> {
        for s in self.inner.store.spares().await? {
            self.drop_spare(&s).await?;
        }
        Ok(())
    }

    async fn drop_spare(&self, s: &Spare) -> Result<()> {
        // A new computer may have taken it a moment ago: then it is that computer's.
        if self.inner.store.remove_spare(&s.id).await? {
            let cref = ComputerRef { id: s.id.clone(), host: s.host.clone() };
            self.inner.provider.destroy(&cref, &CallCtx::default()).await.map_err(|e| crate::EngineError::from(e).context("removing a spare computer"))?;
        }
        Ok(())
    }

    /// Removes the spare computer `id` (`botdesk computer destroy`); false when there is none by
    /// that id. The app makes another while it runs, unless the setting is off.
    pub async fn remove_spare(&self, id: &str) -> Result<bool> {
        let Some(s) = self.inner.store.spares().await?.into_iter().find(|s| s.id.as_str() == id) else { return Ok(false) };
        self.drop_spare(&s).await?;
        Ok(true)
    }

    /// The spare computers, oldest first: their ids and what the provider says of each.
    pub async fn spares(&self) -> Result<Vec<(String, MachineStatus)>> {
        let mut out = vec![];
        for s in self.inner.store.spares().await? {
            let status = self.inner.provider.status(&ComputerRef { id: s.id.clone(), host: s.host.clone() }).await.unwrap_or(MachineStatus::Missing);
            out.push((s.id.to_string(), status));
        }
        Ok(out)
    }

    /// The spare computers' ids, oldest first.
    pub async fn spare_ids(&self) -> Result<Vec<String>> {
        Ok(self.inner.store.spares().await?.into_iter().map(|s| s.id.to_string()).collect())
    }

    /// Wakes when a spare may be wanted (a computer was created, the settings changed).
    pub async fn spare_wanted(&self) {
        self.inner.spare_wanted.notified().await
    }
}
