"""epochfs.benchmarks: each module is one benchmark that measures epochfs against a baseline run
on the same machine in the same run, and prints the ratio.

    epochfs bench [NAME ...] [--args ...]        # from any folder, installed or from a checkout
    python -m epochfs.benchmarks.NAME [...]      # the same, one benchmark, its own --help

``fetch`` (the sampler against s5cmd and rclone on a local S3 server), ``mount`` (reads through the
mount against direct reads), ``loader`` (EpochLoader through the mount against the same loader on
the object files), ``served_opens`` (what counting served samples costs a reader), ``scale`` (the
sidecar against ``synthetic_s3``, a procedural S3 endpoint of up to 10M keys), ``fleet`` (a model of
1,000 nodes against S3's request limits), ``fairness`` (each epoch of a sidecar against uniform random
samples of its size, over shaped key spaces of the synthetic endpoint), ``dashboard`` (not a
measure: the Grafana dashboard's panels drawn from a real Prometheus scraping a real sidecar under
a training loop, docs/dashboard.png), ``images`` (decoded images/s through the mount against the
same DataLoader on local files). ``harness`` holds what they
share. Their dependencies are the ``bench`` extra (``pip install 'epochfs[bench]'``) and, for some
options, programs from the system's packages (rclone, s3fs). docs/performance.md, docs/scale.md.

Nothing in the product imports this package (.importlinter says so); the sidecar image leaves it out.
"""
