#!/usr/bin/env bash
# mkimage.sh ROOT STOCKADE PYTHON: lay out the VM tier's guest root in
# ROOT (run by package vmtier, embedded, which packs it as the squashfs the
# guest mounts read-only as its root; see docs/isolation.md).
#
# The root is what the jail's host-derived root needs from /usr, as
# vmtest/run's build_base lays it out: a usr-merged skeleton, Debian's
# Python with its standard library (without its tests, GUIs and build
# files; the stock .pyc files kept, since compiling them under emulation is
# slow) and the libraries ldd names, the /etc entries the jail binds, and
# stockade itself, which is the guest's init (the initramfs carries it and
# the kernel's modules; init re-executes itself from here). The root is
# read-only in the guest: what the guest writes goes to the tmpfs mounts
# its init makes (/tmp, /run, /srv, /var/cache, /dev/shm).
set -euo pipefail
shopt -s inherit_errexit
root=$1 stockade=$2 python=$3

mkdir -p "$root"/usr/{bin,sbin,lib/x86_64-linux-gnu,lib64,local/bin,lib/stockade} \
	"$root"/{etc,proc,sys,dev,tmp,run,root,srv,work,var/tmp,var/cache}
ln -s usr/bin "$root/bin"
ln -s usr/sbin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"

copy_libs() {
	local lib
	for lib in $(ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(/ { print $1 }' | sort -u); do
		[[ -e "$root$lib" ]] || cp -L "$lib" "$root$lib"
	done
}

name=$(basename "$python")
cp "$python" "$root/usr/bin/$name"
ln -s "$name" "$root/usr/bin/python3"
tar -C /usr/lib -cf - --exclude="$name/test" --exclude="$name/idlelib" \
	--exclude="$name/tkinter" --exclude="$name/turtledemo" --exclude="$name/lib2to3/tests" \
	--exclude="$name/config-*" --exclude="$name/dist-packages" --exclude="$name/site-packages" \
	--exclude="$name/ensurepip" --exclude="$name/pydoc_data" --exclude='_test*.so' \
	--exclude='_ctypes_test*.so' --exclude='_xxtestfuzz*.so' --exclude='xxlimited*.so' \
	--exclude='*.opt-1.pyc' --exclude='*.opt-2.pyc' "$name" | tar -C "$root/usr/lib" -xf -
cp "$stockade" "$root/usr/local/bin/stockade"
copy_libs "$root/usr/bin/$name" "/usr/lib/$name"/lib-dynload/*.so "$stockade"
# The shell and the few tools a payload's subprocess may call, from the
# host's busybox when it has the static one (vmtest installs it).
if [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1; then
	cp /bin/busybox "$root/usr/bin/busybox"
	for applet in sh cat ls echo env true false sleep; do
		[[ -e "$root/usr/bin/$applet" ]] || ln -s busybox "$root/usr/bin/$applet"
	done
fi

# The data stack, when the host's Python has it (Debian's python3-numpy
# and python3-matplotlib): numpy, matplotlib and what matplotlib imports,
# without their tests, the libraries their extensions need (OpenBLAS is
# most of them), matplotlib's data (its fonts) and the files the jail's
# host root binds for it (/etc/matplotlibrc, /etc/fonts). pandas is left
# out (71 MiB more). Measured: +~110 MiB of image (docs/isolation.md).
dist=/usr/lib/python3/dist-packages
if [[ -d $dist/numpy && -d $dist/matplotlib && -f /etc/matplotlibrc ]]; then
	mkdir -p "$root$dist"
	(cd "$dist" && tar -cf - --exclude='*/tests' --exclude='*/testing/tests' --exclude='*.pyi' \
		--exclude='__pycache__/*.opt-*.pyc' \
		numpy matplotlib mpl_toolkits PIL dateutil pyparsing packaging kiwisolver contourpy fontTools \
		cycler.py six.py $(ls -d numpy-* matplotlib-* kiwisolver-* contourpy-* pyparsing-* cycler-* 2>/dev/null)) |
		tar -C "$root$dist" -xf -
	mapfile -t exts < <(find "$root$dist" -name '*.so' | sed "s|^$root||")
	copy_libs "${exts[@]}"
	mkdir -p "$root/usr/share"
	cp -a /usr/share/matplotlib "$root/usr/share/"
	cp -L /etc/matplotlibrc "$root/etc/"
	[[ -d /etc/fonts ]] && cp -aL /etc/fonts "$root/etc/"
	# matplotlib's font cache, built once here in the guest's root (its
	# paths are the guest's), for the guest to seed its jails' cache
	# from (vmtier/fontcache_linux.go): no plot in a guest rebuilds it.
	# Not built (the guest then builds its own) where chroot is refused.
	mpl="$root/usr/lib/stockade/matplotlib"
	mkdir -p "$mpl"
	if env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin MPLCONFIGDIR=/usr/lib/stockade/matplotlib MPLBACKEND=Agg \
		chroot "$root" /usr/bin/python3 -I -B -c 'import matplotlib.font_manager' >/dev/null 2>&1; then
		find "$mpl" -mindepth 1 ! -name 'fontlist-v*.json' -delete
	else
		rm -rf "$mpl"
	fi
fi

for f in /etc/nsswitch.conf /etc/host.conf /etc/protocols /etc/services /etc/mime.types /etc/ld.so.conf; do
	[[ -f "$f" ]] && cp -L "$f" "$root/etc/"
done
[[ -d /etc/ld.so.conf.d ]] && cp -a /etc/ld.so.conf.d "$root/etc/"
cp -L /etc/localtime "$root/etc/localtime" 2>/dev/null || true
if [[ -d /etc/ssl ]]; then
	mkdir -p "$root/etc/ssl/certs"
	[[ -f /etc/ssl/openssl.cnf ]] && cp /etc/ssl/openssl.cnf "$root/etc/ssl/"
	[[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
fi
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1\tlocalhost\n' >"$root/etc/hosts"
echo stockade-vm >"$root/etc/hostname"
ldconfig -r "$root"
