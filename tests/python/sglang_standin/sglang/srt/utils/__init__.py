KILLED = []  # (pid, include_parent) per kill_process_tree call


def kill_process_tree(parent_pid, include_parent=True, skip_pid=None):
    KILLED.append((parent_pid, include_parent))
