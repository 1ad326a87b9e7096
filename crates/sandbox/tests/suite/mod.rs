//! The suite: the conformance checks instantiated per backend, plus backend-specific tests.

mod conformance;
mod egress;
mod linux_backend;
mod linux_egress;
mod support;

/// Instantiates conformance checks as tests of one backend. A backend this machine lacks is
/// skipped with the reason printed (and `probe` must agree); `keyed` checks run in a child
/// test process whose environment holds a canary model key.
macro_rules! conformance {
    ($module:ident, $backend:expr, [$($check:ident),* $(,)?], keyed [$($keyed:ident),* $(,)?]) => {
        mod $module {
            $(
                #[test]
                fn $check() {
                    if let Some(sandbox) = super::support::sandbox($backend) {
                        super::conformance::$check(&sandbox);
                    }
                }
            )*
            $(
                #[test]
                fn $keyed() {
                    if std::env::var("OPENAI_API_KEY").as_deref() != Ok(super::support::CANARY_KEY) {
                        let name = concat!("suite::", stringify!($module), "::", stringify!($keyed));
                        super::support::reexec(
                            name,
                            true,
                            &[("OPENAI_API_KEY", super::support::CANARY_KEY)],
                            false,
                            &[],
                        );
                        return;
                    }
                    if let Some(sandbox) = super::support::sandbox($backend) {
                        super::conformance::$keyed(&sandbox);
                    }
                }
            )*
        }
    };
}

conformance!(
    linux,
    warden_sandbox::Backend::Linux,
    [
        writing_the_snapshot_fails,
        writing_outside_the_writable_layer_fails,
        writable_view_changes_land_in_the_view_only,
        multi_repository_views,
        a_seed_shows_below_the_snapshot_and_is_never_written,
        inet_sockets_fail,
        tcp_to_a_host_listener_fails,
        dns_fails,
        host_files_are_absent,
        proc_shows_only_sandbox_processes,
        fork_bomb_stops_at_the_pids_limit,
        memory_balloon_is_stopped,
        timeout_kills_grandchildren,
        output_flood_is_truncated,
        environment_is_exactly_the_allow_list,
        ptrace_of_the_host_is_impossible,
        commands_behave,
        file_tools_list_the_working_root,
        concurrent_commands,
        cancel_kills_running_commands_and_refuses_new_ones,
        disk_quota_stops_writes_with_enospc,
        inode_quota_stops_file_creation,
        mounted_directories_are_read_only,
        writable_mounts_take_writes,
        a_moved_mount_shows_its_source_at_its_path,
        dangerous_mounts_are_refused,
        piped_command_converses_and_is_killed_on_demand,
    ],
    keyed[model_key_is_absent]
);

conformance!(
    gvisor,
    warden_sandbox::Backend::Gvisor,
    [
        writing_the_snapshot_fails,
        writing_outside_the_writable_layer_fails,
        writable_view_changes_land_in_the_view_only,
        multi_repository_views,
        a_seed_shows_below_the_snapshot_and_is_never_written,
        inet_sockets_fail,
        tcp_to_a_host_listener_fails,
        dns_fails,
        host_files_are_absent,
        proc_shows_only_sandbox_processes,
        fork_bomb_stops_at_the_pids_limit,
        memory_balloon_is_stopped,
        timeout_kills_grandchildren,
        output_flood_is_truncated,
        environment_is_exactly_the_allow_list,
        ptrace_of_the_host_is_impossible,
        commands_behave,
        file_tools_list_the_working_root,
        concurrent_commands,
        cancel_kills_running_commands_and_refuses_new_ones,
        disk_quota_stops_writes_with_enospc,
        inode_quota_stops_file_creation,
        mounted_directories_are_read_only,
        writable_mounts_take_writes,
        a_moved_mount_shows_its_source_at_its_path,
        dangerous_mounts_are_refused,
        piped_command_converses_and_is_killed_on_demand,
    ],
    keyed[model_key_is_absent]
);

// No isolation: only what the backend promises (the caller's environment, the working root,
// timeouts that kill the process group, bounded output, a copy for writable views).
conformance!(
    local,
    warden_sandbox::Backend::Local,
    [
        writable_view_changes_land_in_the_view_only,
        a_seed_shows_below_the_snapshot_and_is_never_written,
        timeout_kills_grandchildren,
        output_flood_is_truncated,
        environment_is_exactly_the_allow_list,
        commands_behave,
        file_tools_list_the_working_root,
        concurrent_commands,
        cancel_kills_running_commands_and_refuses_new_ones,
        a_moved_mount_shows_its_source_at_its_path,
        dangerous_mounts_are_refused,
        piped_command_converses_and_is_killed_on_demand,
    ],
    keyed[]
);

// Against the fake API server (pods are linux views): what a backend without host mounts,
// quotas of its own or isolation testable here promises — the view's tree in both directions,
// timeouts, bounded output, the environment, cancellation and kill switches. Its isolation in a
// cluster (gVisor, the template's security context and network policy) is what `warden k8s
// render` sets up and CI validates. Left out: multi_repository_views, because a read-only
// view's files are read-only by mode only in a pod (the copy is the sandbox user's; what a
// command writes there never reaches Warden), and the fake's pods, writable linux views, let
// their user write through modes anyway.
conformance!(
    kubernetes,
    warden_sandbox::Backend::Kubernetes,
    [
        writable_view_changes_land_in_the_view_only,
        a_seed_shows_below_the_snapshot_and_is_never_written,
        timeout_kills_grandchildren,
        output_flood_is_truncated,
        environment_is_exactly_the_allow_list,
        commands_behave,
        file_tools_list_the_working_root,
        concurrent_commands,
        cancel_kills_running_commands_and_refuses_new_ones,
        piped_command_converses_and_is_killed_on_demand,
    ],
    keyed[]
);
