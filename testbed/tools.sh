#!/usr/bin/env bash
# Host tools the tests use natively: gcc (builds real ELF files linked
# against stub CUDA runtimes), binutils (readelf, the ground truth for the
# ELF reader), util-linux (unshare/setpriv: /dev/nvidia* laid out in a
# private mount namespace), gnupg, and real registries for the tests
# (docker-registry; htpasswd from apache2-utils), iperf3 and ping (spark_cluster_measure
# measured on the loopback), Prometheus and node_exporter (promtool checks the fleet's metrics and tests monitoring/'s alert
# rules; both serve them in the watch tests) and systemd (systemd-analyze checks the watch's units).
source "$(dirname "$0")/lib.sh"
apt_install gcc binutils util-linux gnupg python3 docker-registry apache2-utils iperf3 iputils-ping prometheus \
    prometheus-node-exporter systemd
say "host tools present (gcc $(gcc -dumpversion), $(readelf --version | head -n 1))"
