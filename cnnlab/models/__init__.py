"""cnnlab.models: every network the studies use, behind one registry that each family module fills itself.

    model = cnnlab.models.get("resnet20")            # nn.Module with .input_shape and .num_classes
    cnnlab.models.spec("lstm_sentiment")              # ModelSpec(name, family, input_shape, num_classes, input_kind)
    cnnlab.models.names()                             # all registered names

One module per family (lenet, alexnet, zfnet, convnet_cifar, resnet_cifar, resnet_imagenet, vgg, lstm); each cites
the paper its design follows. Rewrites of a model (``cnnlab.kernels.spatial_tiling``: its first layers run tile by
tile, study 04) live in ``cnnlab.kernels``. The package re-exports the classes; the builder functions (``alexnet``,
``resnet20``, ...) stay in their modules so that none shadows a module of the same name (``cnnlab.models.alexnet``).

A family module registers its builders with ``@register_model`` (cnnlab.models.registry); adding a model is one
decorated builder in its family's module, or one new module added to the import below.
"""

# Importing a family module registers its models, and names() lists them in import order: families grouped, LeNet
# to VGG, then the token model. The modules are therefore imported by name and in this order, not discovered
# (pkgutil would import them alphabetically, and also import helpers that are not families) nor sorted by a tool.
from cnnlab.models import lenet, alexnet, zfnet, convnet_cifar, resnet_cifar, resnet_imagenet, vgg, lstm  # isort: skip

from cnnlab.models.alexnet import AlexNet
from cnnlab.models.convnet_cifar import ConvNetCifar
from cnnlab.models.lenet import LeNet5
from cnnlab.models.lstm import LSTMSentiment
from cnnlab.models.registry import ModelSpec, example_input, get, names, options, register_model, spec
from cnnlab.models.resnet_cifar import ResNetCifar
from cnnlab.models.resnet_imagenet import ResNetImageNet
from cnnlab.models.vgg import VGG
from cnnlab.models.zfnet import ZFNet

__all__ = [
    "ModelSpec",
    "get",
    "names",
    "spec",
    "options",
    "example_input",
    "register_model",
    "AlexNet",
    "ConvNetCifar",
    "LeNet5",
    "LSTMSentiment",
    "ResNetCifar",
    "ResNetImageNet",
    "VGG",
    "ZFNet",
]
