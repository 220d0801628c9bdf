LOADS = []


def load_plugins():
    LOADS.append(True)
