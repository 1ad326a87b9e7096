//! `warden k8s`: what the kubernetes sandbox backend needs in a cluster. `render` prints the
//! manifests an operator applies (`warden k8s render | kubectl apply -f -`), from the
//! `[kubernetes]` and `[sandbox]` settings.

#[derive(Debug, clap::Subcommand)]
pub enum K8sCommand {
    /// Print the manifests the kubernetes backend needs (gVisor RuntimeClass, namespace,
    /// Warden's service account and least-privilege Role, SandboxTemplate, SandboxWarmPool)
    Render,
}

pub fn k8s(config: &warden_engine::config::Config, command: K8sCommand) -> anyhow::Result<u8> {
    match command {
        K8sCommand::Render => {
            print!("{}", config.kubernetes_manifests());
            Ok(0)
        }
    }
}
