SUPPRESSED = []


def suppress_noisy_warnings():
    SUPPRESSED.append(True)
