; Inno Setup script for Miaohui on Windows: installs the PyInstaller one-folder build.
; Build the folder first (packaging\README.md, "Windows"), then from the repository root:
;   iscc /DAppVersion=0.1.0 packaging\windows\miaohui.iss
; Output: packaging\out\miaohui-<version>-windows-x64-setup.exe
; Per-user install by default (no administrator rights needed; the dialog offers all users).
; User data (history, settings, logs, downloaded models) lives in %LOCALAPPDATA%\miaohui (platformdirs),
; never in the install folder, and an uninstall leaves it in place.

#ifndef AppVersion
  #define AppVersion "0.1.0"
#endif
#define AppName "Miaohui"
#define SourceDir "..\out\dist\miaohui"

[Setup]
; A fixed AppId lets an upgrade replace the previous install instead of adding a second one.
AppId={{6B1E7C2A-4F0D-4B7E-9E53-1C0A8F5D2B61}
AppName={#AppName}
AppVerName={#AppName} {#AppVersion}
AppVersion={#AppVersion}
AppPublisher=Miaohui developers
DefaultDirName={autopf}\Miaohui
DefaultGroupName=Miaohui
DisableProgramGroupPage=yes
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
; torch's Windows wheels are x64 only.
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\out
OutputBaseFilename=miaohui-{#AppVersion}-windows-x64-setup
; The bundle is ~1 GB, mostly torch's libraries and the model's weights, which barely compress:
; a fast LZMA2 level and no solid archive keep building (and installing) quick for little size.
Compression=lzma2/fast
SolidCompression=no
DiskSpanning=no
WizardStyle=modern
UninstallDisplayIcon={app}\miaohui.exe
UninstallDisplayName={#AppName}
MinVersion=10.0

[Languages]
Name: "english"; MessagesFile: "compiler:Default.isl"

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"; Flags: unchecked

[Files]
Source: "{#SourceDir}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{autoprograms}\Miaohui"; Filename: "{app}\miaohui.exe"; Comment: "Local LLM chat that shows why it answers fast"
Name: "{autodesktop}\Miaohui"; Filename: "{app}\miaohui.exe"; Tasks: desktopicon

[Run]
Filename: "{app}\miaohui.exe"; Description: "{cm:LaunchProgram,Miaohui}"; Flags: nowait postinstall skipifsilent

[UninstallDelete]
; Only what the app itself may create inside {app} (Python bytecode caches); never the user's data dir.
Type: filesandordirs; Name: "{app}\_internal\__pycache__"
