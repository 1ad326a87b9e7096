//! `warden approve ID --hash H` / `warden reject ID`: the decision on an approval bound to a
//! hash, e.g. publishing a change task's proposal (`warden run --publish`). The decision goes
//! through the front door every interface uses (`TaskService::decide`: single use, exactly the
//! hash the approval is bound to, admins only); the task is then queued again and run here like
//! any other task: approved, its proposal is re-derived from the mirror and must still hash to
//! the approval, then pushed to `warden/<task-id>` on the repository's remote and, with a
//! GitHub target (`--github OWNER/NAME`, a `[[publish]]` entry, or a GitHub remote URL), opened
//! as a pull request; rejected, the task ends with its proposal unpublished. Each publication
//! step journals its intent first and asks the remote before acting, so a crash at any point
//! followed by `warden approve` again (same hash) finishes publication with one branch and one
//! pull request.

#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The approval id (`apr_…`)
    pub id: String,
    /// The hash the approval is bound to, exactly as shown with the proposal
    #[arg(long)]
    pub hash: String,
    /// The GitHub repository (`owner/name`) to open the pull request on, overriding
    /// `[[publish]]` and the remote URL (pass it again when resuming)
    #[arg(long, value_name = "OWNER/NAME")]
    pub github: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RejectArgs {
    /// The approval id (`apr_…`)
    pub id: String,
}
