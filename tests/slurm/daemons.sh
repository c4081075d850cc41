# Sourced by start_cluster.sh (and tests/unit/test_slurm_daemons.py).
#
# stop_daemon NAME PID_FILE: stop the process the pid file names, and wait for it to end, only
# if that process is NAME. A pid file outlives its daemon (a machine restored from a snapshot
# keeps /run), and its number is then reused by any other process: signalling it blindly can
# stop pytest itself and end the test run.
stop_daemon() {
    local name=$1 pid_file=$2 pid
    pid=$(cat "$pid_file" 2>/dev/null || true)
    [[ "$pid" =~ ^[0-9]+$ ]] || return 0
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name" ]] || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
}
